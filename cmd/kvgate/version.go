package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version writes what this binary is: its module version, the commit it
// was built from and the Go release that built it (see buildVersion).
func version(w io.Writer) error {
	v, commit := buildVersion()
	_, err := fmt.Fprintf(w, "kvgate %s (commit %s, %s %s/%s)\n", v, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}

// buildVersion reads the build information the go command embeds, so there
// is nothing to keep in step by hand: the module version (a tag when built
// by `go install ...@vX`, "(devel)" from a checkout) and the commit (with
// "+dirty" when the tree had uncommitted changes).
func buildVersion() (v, commit string) {
	v, commit = "(unknown)", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v, commit
	}
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified {
		commit += "+dirty"
	}
	return bi.Main.Version, commit
}
