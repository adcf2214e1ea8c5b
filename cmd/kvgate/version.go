package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version writes what this binary is: its module version (a tag when built
// by `go install ...@vX`, "(devel)" from a checkout), the commit it was built
// from (with "+dirty" when the tree had uncommitted changes) and the Go
// release that built it, all from the build information the go command
// embeds, so there is nothing to keep in step by hand.
func version(w io.Writer) error {
	v, commit := "(unknown)", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
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
	}
	_, err := fmt.Fprintf(w, "kvgate %s (commit %s, %s %s/%s)\n", v, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}
