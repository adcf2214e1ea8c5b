package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/auth"
)

func TestRedactArgs(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"value as the next argument", []string{"kvgate", "serve", "--api-key", "k1", "--port", "1"},
			[]string{"kvgate", "serve", "--api-key", redacted, "--port", "1"}},
		{"value attached", []string{"serve", "--api-key=k1", "--admin-api-key=k2"},
			[]string{"serve", "--api-key=" + redacted, "--admin-api-key=" + redacted}},
		{"one dash, as the flag package accepts", []string{"-api-key", "k1", "-admin-api-key=k2"},
			[]string{"-api-key", redacted, "-admin-api-key=" + redacted}},
		{"a value that looks like a flag is still the value", []string{"--admin-api-key", "--port", "30000"},
			[]string{"--admin-api-key", redacted, "30000"}},
		{"an empty attached value", []string{"--api-key="}, []string{"--api-key=" + redacted}},
		{"a trailing flag without a value", []string{"serve", "--api-key"}, []string{"serve", "--api-key"}},
		{"key files are paths, not keys", []string{"--api-key-file", "/run/k", "--admin-api-key-file=/run/a"},
			[]string{"--api-key-file", "/run/k", "--admin-api-key-file=/run/a"}},
		{"other flags are untouched", []string{"--tls-key-file", "key.pem", "--host=0.0.0.0"},
			[]string{"--tls-key-file", "key.pem", "--host=0.0.0.0"}},
		{"three dashes is no flag", []string{"---api-key", "x"}, []string{"---api-key", "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.in)
			if got := redactArgs(in); !slices.Equal(got, tt.want) {
				t.Errorf("redactArgs(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if !slices.Equal(in, tt.in) {
				t.Errorf("redactArgs changed its argument to %q", in)
			}
		})
	}
}

// FuzzRedactArgs: whatever the command line, `kvgate serve`'s own flag
// parsing finds no key in the redacted one, and finds every other flag with
// the value it had.
func FuzzRedactArgs(f *testing.F) {
	f.Add("--api-key\x00k\x00--port\x001")
	f.Add("--admin-api-key=x\x00-api-key\x00y")
	f.Add("--api-key\x00--api-key\x00z")
	f.Add("-api-key=\x00--admin-api-key\x00--host\x00--policy=random")
	f.Add("--worker-urls\x00a\x00b\x00--api-key\x00s")
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		out := redactArgs(args)
		if len(out) != len(args) {
			t.Fatalf("redactArgs(%q) has %d arguments, want %d", args, len(out), len(args))
		}
		parse := func(args []string) (*flag.FlagSet, error) {
			var cfg serveConfig
			fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			cfg.register(fs)
			return fs, fs.Parse(joinMultiValues(args, multiValueFlags...))
		}
		before, err := parse(args)
		if err != nil {
			return // serve would refuse this command line
		}
		after, err := parse(out)
		if err != nil {
			t.Fatalf("%q parses but its redaction %q does not: %v", args, out, err)
		}
		before.VisitAll(func(fl *flag.Flag) {
			got := after.Lookup(fl.Name).Value.String()
			switch {
			case !secretFlag(fl.Name):
				if got != fl.Value.String() {
					t.Fatalf("redactArgs(%q) = %q changes --%s from %q to %q", args, out, fl.Name, fl.Value.String(), got)
				}
			case got != "" && got != redacted:
				t.Fatalf("redactArgs(%q) = %q leaves --%s = %q", args, out, fl.Name, got)
			}
		})
	})
}

// Keys come from a file, from the environment or from the flag; the flag and
// its file together are refused; errors name the flag, never the key.
func TestKeySources(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte("  from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KVGATE_API_KEY": "from-env", "KVGATE_ADMIN_API_KEY": "admin-from-env"}
	tests := []struct {
		name            string
		args            []string
		env             map[string]string
		wantKey, wantAd string
		wantErr         string
	}{
		{"none", nil, nil, "", "", ""},
		{"the environment", nil, env, "from-env", "admin-from-env", ""},
		{"the flag over the environment", []string{"--api-key", "from-flag"}, env, "from-flag", "admin-from-env", ""},
		{"a file over the environment, trimmed", []string{"--api-key-file", keyFile, "--admin-api-key-file", keyFile}, env, "from-file", "from-file", ""},
		{"flag and file", []string{"--api-key", "from-flag", "--api-key-file", keyFile}, nil, "", "", "--api-key and --api-key-file are both set"},
		{"an empty file", []string{"--admin-api-key-file", empty}, nil, "", "", "--admin-api-key-file " + empty + " is empty"},
		{"a missing file", []string{"--api-key-file", filepath.Join(dir, "nope")}, nil, "", "", "--api-key-file: open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaults(t, tt.args...)
			err := cfg.resolveKeys(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "from-") {
					t.Fatalf("the error repeats a key: %v", err)
				}
				return
			}
			if err != nil || cfg.apiKey != tt.wantKey || cfg.adminAPIKey != tt.wantAd {
				t.Fatalf("keys %q, %q, err %v; want %q, %q", cfg.apiKey, cfg.adminAPIKey, err, tt.wantKey, tt.wantAd)
			}
		})
	}
}

// `kvgate serve -h` never prints a key taken from the environment as a
// flag's default.
func TestHelpShowsNoKeyFromTheEnvironment(t *testing.T) {
	t.Setenv("KVGATE_API_KEY", "env-router-secret")
	t.Setenv("KVGATE_ADMIN_API_KEY", "env-admin-secret")
	var out strings.Builder
	_ = runServe(context.Background(), []string{"-h"}, &out)
	if !strings.Contains(out.String(), "-api-key") {
		t.Fatalf("help output lacks the flags:\n%s", out.String())
	}
	if strings.Contains(out.String(), "secret") {
		t.Errorf("help output shows a key from the environment:\n%s", out.String())
	}
}

// A router started with its keys on the command line serves them nowhere:
// /debug/pprof/cmdline shows the command line with the keys redacted, and
// the keys given by file are in force.
func TestPprofCmdlineRedactsKeys(t *testing.T) {
	dir := t.TempDir()
	adminFile := filepath.Join(dir, "admin-key")
	if err := os.WriteFile(adminFile, []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--port", "0", "--prometheus-port", "-1", "--embedded-time-scale", "0", "--pprof-addr", "127.0.0.1:0",
		"--api-key", "router-secret", "--admin-api-key-file", adminFile}
	cfg := defaults(t, args...)
	cfg.cmdline = append([]string{"/kvgate", "serve"}, args...)
	cfg.cmdline = append(cfg.cmdline, "--admin-api-key=other-secret") // both forms
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan listening, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), func(l listening) { ready <- l }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	var l listening
	select {
	case l = <-ready:
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not become ready")
	}
	resp, err := http.Get("http://" + l.pprof + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := strings.Split(string(body), "\x00")
	if resp.StatusCode != http.StatusOK || !slices.Contains(got, "--pprof-addr") || !slices.Contains(got, adminFile) {
		t.Fatalf("GET /debug/pprof/cmdline: %s %q; want the command line", resp.Status, got)
	}
	if strings.Contains(string(body), "secret") {
		t.Errorf("/debug/pprof/cmdline shows a key: %q", got)
	}

	conn, err := grpc.NewClient(l.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.Bearer("admin-secret")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := kvgatev1.NewAdminClient(conn).ListWorkers(ctx, &kvgatev1.ListWorkersRequest{}); err != nil {
		t.Errorf("ListWorkers with the key from --admin-api-key-file: %v", err)
	}
	if _, err := kvgatev1.NewRouterClient(conn).Embed(ctx, &kvgatev1.EmbedRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Embed with the Admin key: %v, want UNAUTHENTICATED", err)
	}
}
