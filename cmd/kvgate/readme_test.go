package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// Every flag of `kvgate serve` is documented in README's table, with the
// default the binary really has.
func TestReadmeDocumentsEveryServeFlag(t *testing.T) {
	section := readmeSection(t, "### `kvgate serve`")
	var cfg serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.register(fs)
	fs.VisitAll(func(f *flag.Flag) {
		row := "| `--" + f.Name + "` |"
		i := strings.Index(section, row)
		if i < 0 {
			t.Errorf("README's serve table lacks --%s", f.Name)
			return
		}
		line := section[i:]
		line = line[:strings.Index(line, "\n")]
		def := f.DefValue
		if strings.HasSuffix(f.Name, "api-key") {
			def = "" // from the environment
		}
		if def != "" && def != "[]" && !strings.Contains(line, "`"+def+"`") {
			t.Errorf("README documents --%s without its default `%s`: %s", f.Name, def, line)
		}
	})
}

// readmeMetrics reads README's metrics table and reports whether a metric
// name is documented there: written out, or abbreviated after a full name in
// the same row ("`kvgate_x_observations_total`, `_exact_total`" documents
// kvgate_x_exact_total).
func readmeMetrics(t *testing.T) func(name string) bool {
	t.Helper()
	section := readmeSection(t, "## Metrics")
	names := map[string]bool{}
	for _, row := range strings.Split(section, "\n") {
		if !strings.HasPrefix(row, "| `kvgate_") {
			continue
		}
		cell := strings.Split(row, "|")[1]
		var base string
		for _, f := range strings.Split(cell, "`") {
			f = strings.TrimSpace(f)
			switch {
			case strings.HasPrefix(f, "kvgate_"):
				base = f
				names[f] = true
			case strings.HasPrefix(f, "_") && base != "":
				for i := range base {
					if base[i] == '_' {
						names[base[:i]+f] = true
					}
				}
			}
		}
	}
	return func(name string) bool { return names[name] }
}

// readmeSection returns README's section under heading ("## X" or
// "### X"), up to the next heading of the same level or the next "## ".
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("README has no %q section", heading)
	}
	section := readme[start+1:]
	end := len(section)
	level := heading[:strings.Index(heading, " ")+1] // "## " or "### "
	for _, next := range []string{"\n## ", "\n" + level} {
		if j := strings.Index(section[len(heading):], next); j >= 0 {
			end = min(end, len(heading)+j+1)
		}
	}
	return section[:end]
}
