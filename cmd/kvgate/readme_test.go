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
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "### `kvgate serve`")
	if start < 0 {
		t.Fatal("README has no `kvgate serve` flag section")
	}
	section := readme[start:]
	if end := strings.Index(section[1:], "\n### "); end >= 0 {
		section = section[:end+1]
	}
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
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n## Metrics")
	if start < 0 {
		t.Fatal("README has no Metrics section")
	}
	section := readme[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
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
