package discovery_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// BenchmarkReadyToRouted measures discovery's reaction time: from the
// moment a pod's Ready condition is written to the (fake) API until the
// router has the worker (joined_*) and until a request sent then has been
// served by it (routed_*), p50 and p99 over b.N pods. Each pod is the only
// one, so the request can go nowhere else; it is sent as soon as the
// registry reports the worker, so client polling adds nothing. The API is
// client-go's fake clientset in process: a real API server adds its watch
// latency (typically milliseconds) on top.
//
// It runs with one model (the router's routing context exists before the
// pod) and with many models (--enable-igw, which kvgate serve
// --service-discovery turns on: the pod's model gets its routing context
// when the pod joins, and its first request with token ids is served then).
//
//	go test -run '^$' -bench ReadyToRouted -benchtime 200x ./discovery/
func BenchmarkReadyToRouted(b *testing.B) {
	for _, mode := range []struct {
		name string
		igw  bool
	}{{"one_model", false}, {"igw", true}} {
		b.Run(mode.name, func(b *testing.B) { benchReadyToRouted(b, clusterOptions{igw: mode.igw}) })
	}
}

func benchReadyToRouted(b *testing.B, o clusterOptions) {
	c := startCluster(b, o)
	// Two engines taken in turn: the drain of the pod before (which ends
	// after the worker has left the registry) never delays the next join.
	engines := []*sim.Process{engine(b, sim.RoleRegular), engine(b, sim.RoleRegular)}
	sel := map[string]string{"app": "engine"}
	joinedCh := make(chan struct{}, 1)
	stop := c.g.Registry.Watch(func(ch workers.Change) {
		if len(ch.Added) > 0 {
			select {
			case joinedCh <- struct{}{}:
			default:
			}
		}
	})
	defer stop()
	var joined, routed []time.Duration
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		name, e := fmt.Sprintf("p%d", i), engines[i%2]
		p := podOf(name, e, false, sel)
		c.create(p)
		setReady(p, true)
		start := time.Now()
		c.update(p)
		<-joinedCh
		joined = append(joined, time.Since(start))
		if w, err := c.generate(ctx); err != nil || w != url(e) {
			b.Fatalf("first request: worker %q, %v", w, err)
		}
		routed = append(routed, time.Since(start))
		b.StopTimer()
		c.delete(name)
		c.waitFleet()
		select {
		case <-joinedCh:
		default:
		}
		b.StartTimer()
	}
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"joined", joined}, {"routed", routed}} {
		slices.Sort(m.d)
		b.ReportMetric(ms(m.d[len(m.d)/2]), m.name+"_p50_ms")
		b.ReportMetric(ms(m.d[(len(m.d)*99)/100]), m.name+"_p99_ms")
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
