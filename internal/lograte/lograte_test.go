package lograte_test

import (
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvgate/kvgate/internal/lograte"
	"github.com/kvgate/kvgate/internal/testutil"
)

func TestOneWarningPerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &testutil.Logs{Level: slog.LevelDebug}
		log := logs.Logger()
		l := lograte.New(time.Minute)
		for range 5 {
			l.Warn(log, "gap", "rank", 0)
			time.Sleep(10 * time.Second) // synctest's clock: no wall time
		}
		time.Sleep(20 * time.Second)
		l.Warn(log, "gap", "rank", 0)
		warns, all := logs.Records(slog.LevelWarn), logs.Records(slog.LevelDebug)
		if len(warns) != 2 || len(all) != 6 {
			t.Fatalf("%d WARN lines of %d, want 2 of 6", len(warns), len(all))
		}
		if _, ok := testutil.Attr(warns[0], "suppressed"); ok {
			t.Error("the first line says some were suppressed")
		}
		if v, ok := testutil.Attr(warns[1], "suppressed"); !ok || v.Int64() != 4 {
			t.Errorf("the second line says suppressed=%v, want 4", v)
		}
	})
}
