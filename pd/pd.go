// Package pd serves requests disaggregated into a prefill leg and a decode
// leg: it picks the pair with two policies, reserves the bootstrap room that
// joins them and resolves the prefill engine's bootstrap address, runs the
// two legs under the abort rules (run.go) and reports each leg's real
// outcome to the policy that placed it.
//
// Nothing here knows a protocol: what each leg's request carries (SGLang's
// bootstrap room on both legs sent at once, vLLM's kv_transfer_params_json
// handed from one leg to the next) is the adapters' answer to
// workers.Disaggregator.
package pd

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// Config configures a Dispatcher.
type Config struct {
	// Prefill places the prefill leg (SMG's default: cache_aware); its
	// tree learns only from prefill legs that really computed the prompt.
	Prefill policy.Policy
	// Decode places the decode leg (SMG's default: power_of_two).
	Decode policy.Policy
	// BootstrapPorts overrides the bootstrap ports prefill workers report;
	// workers not in it use the reported port, else DefaultBootstrapPort.
	// Several dispatchers (one per model) may share one table; nil is an
	// empty one.
	BootstrapPorts *BootstrapPorts
	// DecodeAbortWait bounds how long a failed or cancelled request waits
	// for its decode leg's first item before aborting it anyway (see the
	// abort rules in run.go); 0 means DefaultDecodeAbortWait.
	DecodeAbortWait time.Duration
	// Intn draws bootstrap rooms; nil means math/rand/v2's IntN.
	Intn func(n int) int
}

// Dispatcher pairs workers and runs disaggregated requests. It is safe for
// concurrent use.
type Dispatcher struct {
	cfg  Config
	intn func(n int) int

	ports *BootstrapPorts

	mu    sync.Mutex
	rooms map[int32]struct{}
}

// New returns a Dispatcher. Both policies must be set.
func New(cfg Config) *Dispatcher {
	intn := cfg.Intn
	if intn == nil {
		intn = rand.IntN
	}
	ports := cfg.BootstrapPorts
	if ports == nil {
		ports = &BootstrapPorts{}
	}
	return &Dispatcher{cfg: cfg, intn: intn, rooms: make(map[int32]struct{}), ports: ports}
}

// DecodePolicyName is the name of the policy placing decode legs, which
// labels their decisions in metrics.
func (d *Dispatcher) DecodePolicyName() string { return d.cfg.Decode.Name() }

// Pair is a chosen prefill/decode pair and the room reserved for it.
type Pair struct {
	Prefill, Decode policy.Decision
	// Room is the bootstrap room reserved for the request; 0 and nothing
	// reserved for a DryRun decision.
	Room int32

	release func()
}

// Release gives the pair's room back. Dispatch does it when both legs
// have ended; a caller that selects and then does not dispatch must call it.
// It is idempotent.
func (d Pair) Release() {
	if d.release != nil {
		d.release()
	}
}

// Select places the prefill leg among prefills with the prefill policy and
// the decode leg among decodes with the decode policy, and reserves a room
// (except for req.DryRun, which changes no state anywhere). Errors name the
// side and wrap the policy's error (errors.Is(err, policy.ErrNoHealthyWorker)
// holds when a side has no healthy worker).
func (d *Dispatcher) Select(ctx context.Context, req *policy.Request, prefills, decodes []*workers.Worker) (Pair, error) {
	p, err := d.cfg.Prefill.Select(ctx, req, workers.Views(prefills))
	if err != nil {
		return Pair{}, fmt.Errorf("prefill (%s policy, %d workers): %w", d.cfg.Prefill.Name(), len(prefills), err)
	}
	dec, err := d.cfg.Decode.Select(ctx, req, workers.Views(decodes))
	if err != nil {
		// The prefill policy may have learnt the prompt speculatively
		// (cache_aware inserts on Select): the request never ran, and its
		// worker will not count it (Request.Acquires).
		p.Acquired()
		d.observePrefill(req, p, policy.Outcome{Err: err})
		return Pair{}, fmt.Errorf("decode (%s policy, %d workers): %w", d.cfg.Decode.Name(), len(decodes), err)
	}
	out := Pair{Prefill: p, Decode: dec}
	if !req.DryRun {
		out.Room, out.release = d.NewRoom()
	}
	return out, nil
}

// Dispatch starts req on the pair. The returned stream is the
// decode leg as the client sees it (see PairStream for its errors and
// the abort rules, which apply when ctx ends). When the prefill leg ends,
// the prefill policy observes its real outcome (the prefill engine's cached
// tokens, or its failure); when both legs have ended, the decode policy
// observes the decode leg's and the room is released. The legs adopt held,
// the counts the caller's placement took on the two workers (see Legs.Held),
// unless Dispatch fails.
func (d *Dispatcher) Dispatch(ctx context.Context, dec Pair, preq *policy.Request, req *workers.GenerateRequest, held Holds) (PairStream, error) {
	st, err := Run(ctx, dec.Prefill.Worker, dec.Decode.Worker, req,
		Legs{Room: dec.Room, BootstrapPorts: d.ports, DecodeAbortWait: d.cfg.DecodeAbortWait, Held: held})
	if err != nil {
		d.observePrefill(preq, dec.Prefill, policy.Outcome{Err: err})
		d.observeDecode(preq, dec.Decode, policy.Outcome{Err: err})
		dec.Release()
		return nil, err
	}
	go func() {
		<-st.PrefillDone()
		r := st.Prefill()
		d.observePrefill(preq, dec.Prefill, policy.Outcome{CachedTokens: int(r.CachedTokens), Err: r.Err})
		<-st.Done()
		dr := st.Decode()
		d.observeDecode(preq, dec.Decode, policy.Outcome{CachedTokens: int(dr.CachedTokens), OutputIDs: dr.OutputIDs, Err: dr.Err})
		dec.Release()
	}()
	return st, nil
}

func (d *Dispatcher) observePrefill(req *policy.Request, dec policy.Decision, o policy.Outcome) {
	if obs, ok := d.cfg.Prefill.(policy.Observer); ok && req != nil && dec.Worker != nil {
		// The prefill engine keeps the prompt only; what the decode engine
		// generates never reaches its cache.
		o.OutputIDs = nil
		obs.Observe(req, dec, o)
	}
}

func (d *Dispatcher) observeDecode(req *policy.Request, dec policy.Decision, o policy.Outcome) {
	if obs, ok := d.cfg.Decode.(policy.Observer); ok && req != nil && dec.Worker != nil {
		obs.Observe(req, dec, o)
	}
}

// NewRoom reserves a bootstrap room: a random non-negative int32 unique among
// the rooms reserved and not yet released. release is idempotent.
func (d *Dispatcher) NewRoom() (room int32, release func()) {
	d.mu.Lock()
	for {
		room = int32(d.intn(math.MaxInt32) + 1) // [1, MaxInt32]
		if _, taken := d.rooms[room]; !taken {
			break
		}
	}
	d.rooms[room] = struct{}{}
	d.mu.Unlock()
	var once sync.Once
	return room, func() {
		once.Do(func() {
			d.mu.Lock()
			delete(d.rooms, room)
			d.mu.Unlock()
		})
	}
}

// RoomsInFlight is the number of rooms reserved and not yet released.
func (d *Dispatcher) RoomsInFlight() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.rooms)
}

// ParsePrefillURL reads one --worker-urls value of PD mode: a worker address
// (grpc://host:port, http://host:port or host:port), optionally followed by
// @ and the prefill engine's bootstrap port, as in grpc://p1:31000@8998. It
// returns the canonical URL and the port, 0 when none was given (the port the
// engine reports is used then, else 8998).
func ParsePrefillURL(s string) (url string, bootstrapPort int, err error) {
	addr := strings.TrimSpace(s)
	if i := strings.LastIndex(addr, "@"); i >= 0 {
		p, err := strconv.Atoi(addr[i+1:])
		if err != nil || p < 1 || p > 65535 {
			return "", 0, fmt.Errorf("prefill worker %q: bootstrap port after @ must be a number in 1..65535", s)
		}
		addr, bootstrapPort = addr[:i], p
	}
	url, _, err = workers.ParseAddress(addr)
	if err != nil {
		return "", 0, err
	}
	return url, bootstrapPort, nil
}
