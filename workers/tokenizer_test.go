package workers_test

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestTokenizerDownload fetches the simulated engine's built-in tokenizer
// through each protocol's GetTokenizer and checks the files arrive intact.
func TestTokenizerDownload(t *testing.T) {
	for _, p := range allSimProtocols {
		t.Run(p.name, func(t *testing.T) {
			cfg := sim.DefaultConfig()
			cfg.Protocol = p.name
			cfg.TimeScale = 0
			cfg.Logger = slog.New(slog.DiscardHandler)
			srv, err := sim.Start(cfg, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			w, err := workers.Connect(context.Background(), srv.Addr(), workers.ConnectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if got := w.Info().VocabSize; got != 2059 {
				t.Errorf("vocab size %d, want the built-in tokenizer's 2059", got)
			}
			archive, err := w.Backend().Tokenizer(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]byte{}
			for _, f := range zr.File {
				rc, err := f.Open()
				if err != nil {
					t.Fatal(err)
				}
				got[f.Name], _ = io.ReadAll(rc)
				rc.Close()
			}
			for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
				want, err := os.ReadFile("sim/tokenizer/" + name)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got[name], want) {
					t.Errorf("%s: received %d bytes, want the %d committed", name, len(got[name]), len(want))
				}
			}
		})
	}
}

func TestTokenizerDownloadFromEngineWithoutOne(t *testing.T) {
	_, w := simtest.Worker(t, simtest.Config("vllm")) // serves no tokenizer
	_, err := w.Backend().Tokenizer(context.Background())
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("err = %v, want UNIMPLEMENTED", err)
	}
}
