package main

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/metricsdoc"
	"github.com/kvgate/kvgate/workers/sim"
)

// Every flag of `kvgate serve` is documented in the flags reference's table
// (docs/flags.md, which README links), with the default the binary really has.
func TestReadmeDocumentsEveryServeFlag(t *testing.T) {
	section := docSection(t, flagsDoc, "## `kvgate serve`")
	var cfg serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.register(fs)
	fs.VisitAll(func(f *flag.Flag) {
		row := "| `--" + f.Name + "` |"
		i := strings.Index(section, row)
		if i < 0 {
			t.Errorf("docs/flags.md's serve table lacks --%s", f.Name)
			return
		}
		line := section[i:]
		line = line[:strings.Index(line, "\n")]
		def := f.DefValue
		if strings.HasSuffix(f.Name, "api-key") {
			def = "" // from the environment
		}
		if def != "" && def != "[]" && !strings.Contains(line, "`"+def+"`") {
			t.Errorf("docs/flags.md documents --%s without its default `%s`: %s", f.Name, def, line)
		}
	})
}

// documentedMetrics reads the metrics reference, docs/metrics.md (README's
// metrics section links to it), and reports whether a metric is documented
// there. server/metricsdoc_test.go holds the reference to every metric and
// label; this checks what the embedded default serves.
func documentedMetrics(t *testing.T) func(name string) bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := metricsdoc.Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return func(name string) bool { _, ok := doc.Metrics[name]; return ok }
}

// flagsDoc is the flags reference README links to: one table per command.
const flagsDoc = "../../docs/flags.md"

// docSection returns the section of the markdown file at path under heading
// ("## X" or "### X"), up to the next heading of the same level or the next
// "## ".
func docSection(t *testing.T, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("%s has no %q section", path, heading)
	}
	section := doc[start+1:]
	end := len(section)
	level := heading[:strings.Index(heading, " ")+1] // "## " or "### "
	for _, next := range []string{"\n## ", "\n" + level} {
		if j := strings.Index(section[len(heading):], next); j >= 0 {
			end = min(end, len(heading)+j+1)
		}
	}
	return section[:end]
}

// Every flag of `kvgate bench` has a row in docs/flags.md's bench table, with its
// default: the workload's, the overhead rig's and the simulated engines'
// (copied from `kvgate sim`, so a flag added there must be documented here
// too).
func TestReadmeDocumentsEveryBenchFlag(t *testing.T) {
	var c benchConfig
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	c.register(fs)
	tableDocuments(t, "## `kvgate bench`", fs)
}

// Every flag of `kvgate sim` has a row in docs/flags.md's sim table, with its
// default.
func TestReadmeDocumentsEverySimFlag(t *testing.T) {
	cfg := sim.DefaultConfig()
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	var zf simZMQFlags
	zf.register(fs)
	tableDocuments(t, "## `kvgate sim`", fs)
}

// Every flag of `kvgate relay` has a row in docs/flags.md's relay table.
func TestReadmeDocumentsEveryRelayFlag(t *testing.T) {
	var c relayConfig
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	c.register(fs)
	tableDocuments(t, "## `kvgate relay`", fs)
}

// tableDocuments checks that the docs/flags.md section under heading has a row
// for every flag of fs, quoting its default (false for a switch needs no
// quote).
func tableDocuments(t *testing.T, heading string, fs *flag.FlagSet) {
	t.Helper()
	section := docSection(t, flagsDoc, heading)
	fs.VisitAll(func(f *flag.Flag) {
		i := strings.Index(section, "| `--"+f.Name+"` |")
		if i < 0 {
			t.Errorf("docs/flags.md's %s table lacks --%s", heading, f.Name)
			return
		}
		line := section[i:]
		line = line[:strings.Index(line, "\n")]
		if def := f.DefValue; def != "" && def != "false" && !strings.Contains(line, "`"+def+"`") {
			t.Errorf("docs/flags.md documents --%s without its default `%s`: %s", f.Name, def, line)
		}
	})
}
