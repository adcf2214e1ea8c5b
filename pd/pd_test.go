package pd_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

func TestParsePrefillURL(t *testing.T) {
	tests := []struct {
		in       string
		url      string
		port     int
		errMatch string
	}{
		{"grpc://p1:31000@8998", "grpc://p1:31000", 8998, ""},
		{"grpc://p1:31000", "grpc://p1:31000", 0, ""},
		{"http://prefill1:8000@9001", "grpc://prefill1:8000", 9001, ""},
		{" p2:31000@7000 ", "grpc://p2:31000", 7000, ""},
		{"grpc://p1:31000@", "", 0, "bootstrap port"},
		{"grpc://p1:31000@0", "", 0, "bootstrap port"},
		{"grpc://p1:31000@70000", "", 0, "bootstrap port"},
		{"grpc://p1:31000@x", "", 0, "bootstrap port"},
		{"grpc://p1@8998", "", 0, "want grpc://host:port"},
	}
	for _, tt := range tests {
		url, port, err := pd.ParsePrefillURL(tt.in)
		if tt.errMatch != "" {
			if err == nil || !strings.Contains(err.Error(), tt.errMatch) {
				t.Errorf("ParsePrefillURL(%q) error = %v, want one saying %q", tt.in, err, tt.errMatch)
			}
			continue
		}
		if err != nil || url != tt.url || port != tt.port {
			t.Errorf("ParsePrefillURL(%q) = %q, %d, %v; want %q, %d", tt.in, url, port, err, tt.url, tt.port)
		}
	}
}

func TestNewRoomUniqueUnderConcurrency(t *testing.T) {
	// A narrow random source makes collisions certain: uniqueness must come
	// from the reservation, not from luck.
	var rmu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	d := pd.New(pd.Config{Intn: func(int) int {
		rmu.Lock()
		defer rmu.Unlock()
		return rng.IntN(512)
	}})
	var mu sync.Mutex
	held := map[int32]bool{}
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Go(func() {
			for i := 0; i < 200; i++ {
				room, release := d.NewRoom()
				mu.Lock()
				if held[room] {
					t.Errorf("room %d handed out twice", room)
				}
				if room < 0 {
					t.Errorf("negative room %d", room)
				}
				held[room] = true
				mu.Unlock()
				mu.Lock()
				delete(held, room)
				mu.Unlock()
				release()
				release() // idempotent
			}
		})
	}
	wg.Wait()
	if n := d.RoomsInFlight(); n != 0 {
		t.Errorf("%d rooms still reserved", n)
	}

	room, release := pd.New(pd.Config{}).NewRoom()
	defer release()
	if room < 0 {
		t.Errorf("default source gave room %d", room)
	}
}

// fleet builds unconnected workers for selection-only tests (policies never
// dial a worker).
func fleet(role workers.Role, urls ...string) []*workers.Worker {
	out := make([]*workers.Worker, len(urls))
	for i, u := range urls {
		out[i] = workers.NewWorker(u, workers.ProtocolSGLang, role, workers.ModelInfo{}, nil, nil)
	}
	return out
}

func mustPolicy(t *testing.T, name string) policy.Policy {
	t.Helper()
	p, err := policy.New(name, policy.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSelect(t *testing.T) {
	prefills := fleet(workers.RolePrefill, "grpc://p1:1", "grpc://p2:1")
	decodes := fleet(workers.RoleDecode, "grpc://d1:1", "grpc://d2:1")
	for _, prefillPolicy := range []string{"cache_aware", "bucket", "round_robin", "prefix_hash"} {
		t.Run(prefillPolicy, func(t *testing.T) {
			d := pd.New(pd.Config{Prefill: mustPolicy(t, prefillPolicy), Decode: mustPolicy(t, "power_of_two")})
			req := &policy.Request{RequestID: "r", InputIDs: make([]uint32, 64)}

			dry := *req
			dry.DryRun = true
			dec, err := d.Select(t.Context(), &dry, prefills, decodes)
			if err != nil || dec.Prefill.Worker == nil || dec.Decode.Worker == nil {
				t.Fatalf("dry run: %+v, %v", dec, err)
			}
			if d.RoomsInFlight() != 0 {
				t.Error("a dry run reserved a room")
			}

			dec, err = d.Select(t.Context(), req, prefills, decodes)
			if err != nil {
				t.Fatal(err)
			}
			if dec.Prefill.Worker.Role() != workers.RolePrefill || dec.Decode.Worker.Role() != workers.RoleDecode {
				t.Errorf("pair %v / %v", dec.Prefill.Worker, dec.Decode.Worker)
			}
			if d.RoomsInFlight() != 1 || dec.Room < 0 {
				t.Errorf("room %d, %d in flight", dec.Room, d.RoomsInFlight())
			}
			dec.Release()
			if d.RoomsInFlight() != 0 {
				t.Error("Release kept the room")
			}
		})
	}
}

func TestSelectNamesTheSideWithoutWorkers(t *testing.T) {
	prefills := fleet(workers.RolePrefill, "grpc://p1:1")
	decodes := fleet(workers.RoleDecode, "grpc://d1:1")
	decodes[0].SetHealthy(false)
	d := pd.New(pd.Config{Prefill: mustPolicy(t, "cache_aware"), Decode: mustPolicy(t, "power_of_two")})
	_, err := d.Select(context.Background(), &policy.Request{InputIDs: []uint32{1}}, prefills, decodes)
	if !errors.Is(err, policy.ErrNoHealthyWorker) || !strings.HasPrefix(err.Error(), "decode") {
		t.Errorf("err = %v, want a decode-side ErrNoHealthyWorker", err)
	}
	if d.RoomsInFlight() != 0 {
		t.Error("a failed selection reserved a room")
	}
}
