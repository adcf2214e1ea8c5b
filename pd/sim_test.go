package pd_test

// The dispatcher against 2 prefill + 2 decode simulated engines of each
// protocol: streams complete, each decode engine fetched the room its prefill
// engine published, and cache_aware sends a repeated prompt back to the
// prefill engine that computed it, whose cached_tokens then cover it.

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// pdEngine serves a test engine of protocol in role (prefill or decode) and
// connects a worker to it in that role.
func pdEngine(t *testing.T, protocol, role string) (*sim.Process, *workers.Worker) {
	t.Helper()
	cfg := simtest.Config(protocol)
	cfg.Role = role
	cfg.BootstrapTimeout = time.Second
	return simtest.Worker(t, cfg)
}

func TestDispatchAgainstSimulatedEngines(t *testing.T) {
	for _, protocol := range []string{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		t.Run(protocol, func(t *testing.T) {
			var psrv, dsrv []*sim.Process
			var prefills, decodes []*workers.Worker
			for range 2 {
				s, w := pdEngine(t, protocol, sim.RolePrefill)
				psrv, prefills = append(psrv, s), append(prefills, w)
				s, w = pdEngine(t, protocol, sim.RoleDecode)
				dsrv, decodes = append(dsrv, s), append(decodes, w)
			}
			prefillPolicy := &recorder{Policy: mustPolicy(t, "cache_aware")}
			d := pd.New(pd.Config{Prefill: prefillPolicy, Decode: mustPolicy(t, "power_of_two")})

			prompt := make([]uint32, 256)
			for i := range prompt {
				prompt[i] = uint32(3000 + i)
			}
			var firstWorker *workers.Worker
			for i := range 3 {
				preq := &policy.Request{RequestID: "sim", InputIDs: prompt}
				dec, err := d.Select(t.Context(), preq, prefills, decodes)
				if err != nil {
					t.Fatal(err)
				}
				st, err := d.Dispatch(t.Context(), dec, preq, &workers.GenerateRequest{
					RequestID: "sim", InputIDs: prompt,
					Sampling: workers.Sampling{MaxNewTokens: ptr(uint32(4)), IgnoreEOS: true},
				}, pd.Holds{})
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for {
					c, err := st.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
					n += len(c.TokenIDs)
				}
				if n != 4 {
					t.Errorf("request %d: %d tokens, want 4", i, n)
				}
				<-st.Done()
				if i == 0 {
					firstWorker = dec.Prefill.Worker
				} else if dec.Prefill.Worker != firstWorker || dec.Prefill.Branch != "cache_hit" {
					t.Errorf("request %d went to %v (%s), want %v by cache_hit", i, dec.Prefill.Worker, dec.Prefill.Branch, firstWorker)
				}
				if cached := st.Prefill().CachedTokens; i > 0 && cached < 240 {
					t.Errorf("request %d: prefill engine reported %d cached tokens of 256", i, cached)
				}
			}
			testutil.Eventually(t, "rooms released and outcomes observed", func() bool {
				return d.RoomsInFlight() == 0 && len(prefillPolicy.seen()) == 3
			})
			var published, fetched, waits uint64
			for i := range 2 {
				ps, ds := psrv[i].Engine().Stats(), dsrv[i].Engine().Stats()
				published, fetched, waits = published+ps.RoomsPublished, fetched+ps.RoomsFetched, waits+ds.RoomWaits
			}
			if published != 3 || fetched != 3 || waits != 3 {
				t.Errorf("rooms published %d, fetched %d, waited for %d; want 3 each", published, fetched, waits)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
