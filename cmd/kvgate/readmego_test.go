package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
)

// TestReadmeGoExample compiles README's Go example into a program and runs
// it against a live router on its embedded default: a snippet a user copies
// must build against the generated package as it is, and do what its prints
// say (the echoed answer on a worker, then Explain's worker and branch).
func TestReadmeGoExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a program")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	section := docSection(t, "../../README.md", "#### Go")
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("README's Go section has no ```go block")
	}
	if !strings.Contains(m[1], `"localhost:30000"`) {
		t.Fatal("README's Go example does not dial localhost:30000, the quick start's router")
	}

	l := startServe(t)

	// The example is a function body; the program around it is the least
	// that makes it one. The file is laid over the module with -overlay, so
	// the source tree is never written.
	body := strings.ReplaceAll(m[1], `"localhost:30000"`, `"`+l.grpc+`"`)
	program := `package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

func run(ctx context.Context) error {
` + body + `	return nil
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(root, "internal", "readmegoexample", "main.go"): src},
	})
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(testutil.Context(t, 5*time.Minute), goBin, "run", "-overlay", ov, "./internal/readmegoexample")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README's Go example: %v\n%s\nprogram:\n%s", err, out, program)
	}
	// Two lines: the echoed answer with its worker and cached tokens, then
	// Explain's worker, branch and reason.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	answer := regexp.MustCompile(`^"What is a KV cache\?" on grpc://\S+, \d+ cached tokens$`)
	explain := regexp.MustCompile(`^grpc://\S+ (cache_hit|cache_miss|imbalance) \S`)
	if len(lines) != 2 || !answer.MatchString(lines[0]) || !explain.MatchString(lines[1]) {
		t.Errorf("the example printed\n%s\nwant the echoed question on a worker, then Explain's worker, branch and reason", out)
	}
}
