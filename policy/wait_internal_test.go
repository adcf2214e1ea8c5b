package policy

import (
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// TestWaitChooseAllocatesNothing: cache_aware prices the candidates under
// its tree's write lock, so the wait mode's choice (the fleet's pressure
// and the uneven-lane charge included) must not allocate.
func TestWaitChooseAllocatesNothing(t *testing.T) {
	m := waitModel{evictWeight: DefaultEvictWeight, fleetWeight: DefaultFleetWeight, unevenWeight: 1, stepWeight: DefaultStepWeight}
	step := workers.StepModel{Base: 0.01, PerRequest: 0.006, Tokens: 100}
	f := &waitFleet{rate: 20000, step: step, share: stepShare(step), slowsPer: 0.6}
	wl := []waitLoad{
		{costLoad: costLoad{queue: 30000}, load: 8, limit: 8, runSec: 4, waitFleet: f},
		{costLoad: costLoad{queue: 2000, capacity: 400000, fullness: 0.9}, load: 3, limit: 8, runSec: 4, waitFleet: f},
		{load: 9, limit: 8, runSec: 4, waitFleet: f},
	}
	matched, loads := []int{3072, 0, 1024}, []int{8, 3, 9}
	c := &waitChoice{cands: make([]waitCand, len(wl))}
	if n := testing.AllocsPerRun(100, func() { m.choose(c, 4096, matched, loads, wl) }); n != 0 {
		t.Errorf("choose allocated %v times a selection, want 0", n)
	}
	if c.pressure <= 0 || c.pressure >= 1 {
		t.Errorf("pressure %v, want between 0 and 1 (soonest start 100ms of a 205ms prefill)", c.pressure)
	}
}
