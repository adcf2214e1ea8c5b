package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A rig waits for a process it started until the process serves, ends, or
// the wait's bound passes, and says which.
func TestUntilServes(t *testing.T) {
	notYet := errors.New("connection refused")
	tests := []struct {
		name string
		// servesAt is the try that succeeds (0: none); exitAt the try
		// after which the process ends (0: it does not).
		servesAt, exitAt int
		want             string // "" for nil, else a part of the error
		// wantTries is how many tries; with orOneMore one more may come,
		// when a tick and the bound fall at the same instant.
		wantTries int
		orOneMore bool
	}{
		{name: "serves at once", servesAt: 1, wantTries: 1},
		{name: "serves on the fifth try", servesAt: 5, wantTries: 5},
		{name: "ends after two tries", exitAt: 2, want: "exited before it served a request (the last try: connection refused)", wantTries: 2},
		{name: "never serves", want: "served no request within 1m0s: connection refused", wantTries: 600, orOneMore: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				exited := make(chan struct{})
				tries := 0
				err := untilServes(context.Background(), time.Minute, exited, func(ctx context.Context) error {
					tries++
					if _, ok := ctx.Deadline(); !ok {
						t.Error("a probe without a deadline")
					}
					if tries == tt.exitAt {
						close(exited)
					}
					if tries == tt.servesAt {
						return nil
					}
					return notYet
				})
				switch {
				case tt.want == "" && err != nil:
					t.Fatalf("err %v, want nil", err)
				case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
					t.Fatalf("err %v, want one containing %q", err, tt.want)
				}
				if tt.exitAt > 0 && !errors.Is(err, errExited) {
					t.Errorf("err %v does not wrap errExited", err)
				}
				if tries != tt.wantTries && !(tt.orOneMore && tries == tt.wantTries+1) {
					t.Errorf("%d tries, want %d", tries, tt.wantTries)
				}
			})
		})
	}
}
