package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
)

var simAddress = regexp.MustCompile(`simulated engine serving.*address=(\S+)`)

// TestReadmeRunningAgainstEngines runs the commands of README's "Running
// against engines": each `kvgate sim` line starts that engine (on a free
// port instead of the one written), and a `kvgate serve` line whose workers
// are those engines serves a request through them. A line whose engines
// are on other machines can only be checked for its flags, which parse as
// `kvgate serve` parses them.
func TestReadmeRunningAgainstEngines(t *testing.T) {
	blocks := shellBlocks(docSection(t, "../../README.md", "## Running against engines"))
	if len(blocks) == 0 {
		t.Fatal("README's Running against engines has no sh block")
	}
	sims := map[string]string{} // the port written → the address the engine serves
	ran := 0
	for _, line := range strings.Split(strings.ReplaceAll(blocks[0], "\\\n", " "), "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		words := strings.Fields(strings.TrimSuffix(strings.TrimSpace(line), "&"))
		if len(words) == 0 {
			continue
		}
		if len(words) < 2 || words[0] != "kvgate" {
			t.Fatalf("%q is not a kvgate command; this test knows kvgate sim and kvgate serve", line)
		}
		switch args := words[2:]; words[1] {
		case "sim":
			written := ""
			for i, a := range args {
				if a == "--port" && i+1 < len(args) {
					written, args[i+1] = args[i+1], "0"
				}
			}
			if written == "" {
				t.Fatalf("%q names no --port", line)
			}
			logs := &testutil.Buffer{}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- runSim(ctx, args, logs) }()
			t.Cleanup(func() { cancel(); <-done })
			testutil.Eventually(t, "the engine of "+line+" to serve", func() bool {
				m := simAddress.FindStringSubmatch(logs.String())
				if m != nil {
					sims[written] = m[1]
				}
				return m != nil
			})
		case "serve":
			cfg := defaults(t, args...) // the flags parse as written
			local := len(cfg.workerURLs) > 0
			var urls []string
			for _, u := range cfg.workerURLs {
				for _, one := range strings.Split(u, ",") {
					port, ok := strings.CutPrefix(one, "grpc://127.0.0.1:")
					addr, started := sims[port]
					local = local && ok && started
					urls = append(urls, "grpc://"+addr)
				}
			}
			if !local {
				continue // engines on other machines: the flags parsed above is what can be run
			}
			for i, a := range args {
				for port, addr := range sims {
					args[i] = strings.ReplaceAll(a, "127.0.0.1:"+port, addr)
					a = args[i]
				}
			}
			l := startServe(t, args...)
			conn := testutil.Dial(t, l.grpc)
			st, err := kvgatev1.NewRouterClient(conn).Generate(testutil.Context(t, testutil.Patience),
				&kvgatev1.GenerateRequest{InputIds: []uint32{1, 2, 3, 4, 5, 6, 7, 8}})
			if err != nil {
				t.Fatal(err)
			}
			var served string
			for {
				r, err := st.Recv()
				if err != nil {
					t.Fatalf("Generate through %q: %v", line, err)
				}
				if c := r.GetComplete(); c != nil {
					served = c.GetWorker()
					break
				}
			}
			if !strings.Contains(strings.Join(urls, " "), served) || served == "" {
				t.Errorf("served by %q, not one of the README's engines %v", served, urls)
			}
			ran++
		default:
			t.Fatalf("%q: this test knows kvgate sim and kvgate serve", line)
		}
	}
	if ran == 0 {
		t.Fatal(fmt.Sprint("no kvgate serve line of the block ran against the engines it starts; sims: ", sims))
	}
}

// TestReadmeProfiling runs README's profiling commands (`go tool pprof`,
// non-interactively, the CPU profile for one second instead of thirty)
// against a router started with the --pprof-addr the prose gives.
func TestReadmeProfiling(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	section := docSection(t, "../../README.md", "## Profiling")
	if !strings.Contains(section, "`--pprof-addr 127.0.0.1:6060`") {
		t.Fatal("README's profiling section does not give --pprof-addr 127.0.0.1:6060")
	}
	blocks := shellBlocks(section)
	if len(blocks) != 1 {
		t.Fatalf("README's profiling section has %d sh blocks; this test knows one", len(blocks))
	}
	l := startServe(t, "--pprof-addr", "127.0.0.1:0")
	cmds, err := shellCommands(blocks[0], map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		words := c.stages[0]
		if len(words) < 4 || strings.Join(words[:3], " ") != "go tool pprof" {
			t.Fatalf("%q is not a go tool pprof command", c.line)
		}
		args := slices.Clone(words[1:])
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, "127.0.0.1:6060", l.pprof)
			if a == "-seconds" && i+1 < len(args) {
				args[i+1] = "1"
			}
		}
		args = append(args[:2], append([]string{"-top"}, args[2:]...)...)
		cmd := exec.CommandContext(testutil.Context(t, 4*testutil.Patience), goBin, args...)
		cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "flat%") {
			t.Errorf("%s: %v\n%s", c.line, err, out)
		}
	}
}
