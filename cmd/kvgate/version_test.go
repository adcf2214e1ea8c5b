package main

import (
	"bytes"
	"regexp"
	"testing"
)

func TestVersionNamesTheBuild(t *testing.T) {
	var out bytes.Buffer
	if err := version(&out); err != nil {
		t.Fatal(err)
	}
	// A test binary has no VCS stamp; a built kvgate has its commit.
	if !regexp.MustCompile(`^kvgate \S+ \(commit \S+, go\S+ \w+/\w+\)\n$`).Match(out.Bytes()) {
		t.Fatalf("version printed %q", out.String())
	}
}
