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
