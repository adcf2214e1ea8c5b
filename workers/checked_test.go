package workers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestCheckedStream runs the simulator's GarbageStream fault through both
// adapters: out-of-vocabulary ids in chunks or in a non-streamed completion
// end the stream with DATA_LOSS; a healthy stream passes unchanged.
func TestCheckedStream(t *testing.T) {
	tests := []struct {
		name     string
		faults   sim.Faults
		noStream bool
		wantMsg  string // empty: the stream completes
	}{
		{"healthy stream", sim.Faults{}, false, ""},
		{"healthy completion only", sim.Faults{}, true, ""},
		{"garbage chunks", sim.Faults{GarbageStream: true}, false, "chunk token 0 is id 128256"},
		{"garbage completion", sim.Faults{GarbageStream: true}, true, "completion token 0 is id 128256"},
	}
	for _, p := range allSimProtocols {
		for _, tt := range tests {
			t.Run(p.name+"/"+tt.name, func(t *testing.T) {
				srv, w := simtest.Worker(t, simtest.Config(p.name))
				srv.Engine().SetFaults(tt.faults)
				s, err := w.Backend().Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{
					RequestID: "checked", InputIDs: testutil.Tokens(5, 20), NoStream: tt.noStream,
					Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](4), IgnoreEOS: true},
				})
				if err != nil {
					t.Fatal(err)
				}
				s = workers.CheckedStream(s, w.Info().VocabSize)
				var fin *workers.Completion
				for fin == nil && err == nil {
					var c workers.Chunk
					c, err = s.Recv()
					fin = c.Final
				}
				if tt.wantMsg == "" {
					if err != nil || len(fin.OutputIDs) != 4 {
						t.Fatalf("completion %+v, err %v", fin, err)
					}
					return
				}
				if !testutil.IsFault(err, fault.Corrupt) || !strings.Contains(err.Error(), tt.wantMsg) {
					t.Fatalf("err %v, want DATA_LOSS mentioning %q", err, tt.wantMsg)
				}
				if _, again := s.Recv(); again == nil || again.Error() != err.Error() {
					t.Errorf("Recv after the error: %v", again)
				}
			})
		}
	}
}

// fixedStream replays chunks, for the one case the simulator cannot produce
// alone: a completion that contradicts in-vocabulary chunks.
type fixedStream []workers.Chunk

func (f *fixedStream) Recv() (workers.Chunk, error) {
	c := (*f)[0]
	*f = (*f)[1:]
	return c, nil
}

func TestCheckedStreamContradiction(t *testing.T) {
	tests := []struct {
		name    string
		out     []uint32
		wantErr bool
	}{
		{"completion repeats the chunks", []uint32{7, 8}, false},
		{"completion adds tokens not streamed", []uint32{7, 8, 9}, false},
		{"aborted completion lists nothing", nil, false},
		{"completion contradicts a chunk", []uint32{7, 9}, true},
		{"completion shorter than the chunks", []uint32{7}, true},
	}
	for _, tt := range tests {
		s := fixedStream{{TokenIDs: []uint32{7}}, {TokenIDs: []uint32{8}}, {Final: &workers.Completion{OutputIDs: tt.out}}}
		cs := workers.CheckedStream(&s, 100)
		var err error
		for range 3 {
			if _, err = cs.Recv(); err != nil {
				break
			}
		}
		if testutil.IsFault(err, fault.Corrupt) != tt.wantErr {
			t.Errorf("%s: err %v, want DATA_LOSS %v", tt.name, err, tt.wantErr)
		}
	}
}
