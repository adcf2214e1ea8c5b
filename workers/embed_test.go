package workers_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestSimEmbed sends Embed through each protocol's adapter to the simulated
// engine: the vector is the simulator's documented function of the tokens,
// the same on both protocols, and the engine's refusals and faults arrive as
// the statuses the router classifies.
func TestSimEmbed(t *testing.T) {
	ids := testutil.Tokens(500, 40)
	want := sim.Embedding(ids, sim.DefaultConfig().EmbeddingDim)
	for _, p := range allSimProtocols {
		t.Run(p.name, func(t *testing.T) {
			srv, w := simtest.Worker(t, simtest.Config(p.name))
			ctx := testutil.Context(t, 5*time.Second)
			got, err := w.Backend().Embed(ctx, &workers.EmbedRequest{RequestID: "e1", InputIDs: ids})
			if err != nil {
				t.Fatal(err)
			}
			if got.PromptTokens != uint32(len(ids)) || len(got.Embedding) != len(want) {
				t.Fatalf("prompt_tokens %d, %d values; want %d, %d", got.PromptTokens, len(got.Embedding), len(ids), len(want))
			}
			for k := range want {
				if got.Embedding[k] != want[k] {
					t.Fatalf("value %d is %v; want %v", k, got.Embedding[k], want[k])
				}
			}
			if st := srv.Engine().Stats(); st.Embeds != 1 || st.EmbedTokens != uint64(len(ids)) {
				t.Errorf("engine counted %d embeds of %d tokens; want 1 of %d", st.Embeds, st.EmbedTokens, len(ids))
			}

			for _, tc := range []struct {
				name   string
				ids    []uint32
				faults sim.Faults
				code   codes.Code // the engine's status; OK: the adapter refused its answer as corrupt
			}{
				{"empty input", nil, sim.Faults{}, codes.InvalidArgument},
				{"out of vocabulary", []uint32{1, 128256}, sim.Faults{}, codes.InvalidArgument},
				{"longer than the context", testutil.Tokens(1, 4097), sim.Faults{}, codes.InvalidArgument},
				{"engine unavailable", ids, sim.Faults{Unavailable: true}, codes.Unavailable},
				// The dimension contradicts the vector; TensorRT-LLM's protocol
				// states none, and its vector holds a NaN instead.
				{"garbage vector", ids, sim.Faults{GarbageStream: true}, codes.OK},
			} {
				srv.Engine().SetFaults(tc.faults)
				_, err := w.Backend().Embed(ctx, &workers.EmbedRequest{RequestID: "e-" + tc.name, InputIDs: tc.ids})
				if tc.code == codes.OK && !testutil.IsFault(err, fault.Corrupt) || tc.code != codes.OK && status.Code(err) != tc.code {
					t.Errorf("%s: %v; want %v", tc.name, err, tc.code)
				}
			}
		})
	}
}
