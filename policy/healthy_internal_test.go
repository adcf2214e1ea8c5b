package policy

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// TestHealthy is the candidate filter every policy uses: the usable
// candidates in order, and the caller's own slice, not a copy, when all of
// them are usable.
func TestHealthy(t *testing.T) {
	ws := make([]*workers.Worker, 5)
	for i := range ws {
		ws[i] = workers.NewWorker(fmt.Sprintf("grpc://127.0.0.1:%d", 9100+i), workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
	}
	for _, tc := range []struct {
		name      string
		unhealthy []int
		exclude   []int
		want      []int
	}{
		{"all usable", nil, nil, []int{0, 1, 2, 3, 4}},
		{"first unhealthy", []int{0}, nil, []int{1, 2, 3, 4}},
		{"middle unhealthy", []int{2}, nil, []int{0, 1, 3, 4}},
		{"last unhealthy", []int{4}, nil, []int{0, 1, 2, 3}},
		{"unhealthy and excluded", []int{1}, []int{3}, []int{0, 2, 4}},
		{"none usable", []int{0, 1, 2}, []int{3, 4}, []int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, w := range ws {
				w.SetHealthy(!slices.Contains(tc.unhealthy, i))
			}
			req := &Request{}
			for _, i := range tc.exclude {
				req.Exclude = append(req.Exclude, ws[i].URL())
			}
			vs := workers.Views(ws)
			got := healthy(req, vs)
			var want []workers.View
			for _, i := range tc.want {
				want = append(want, vs[i])
			}
			if !slices.Equal(got, want) {
				t.Fatalf("healthy = %v, want %v", got, want)
			}
			if len(tc.want) == len(ws) && &got[0] != &vs[0] {
				t.Fatal("all usable: got a copy, want the candidates themselves")
			}
		})
	}
}
