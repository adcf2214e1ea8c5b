package main

import (
	"flag"
	"slices"
	"testing"
)

func TestWorkerURLsAcceptEverySpelling(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"space separated, as in SMG's examples", []string{"--worker-urls", "grpc://a:1", "grpc://b:2", "--policy", "random"}, []string{"grpc://a:1", "grpc://b:2"}},
		{"comma separated", []string{"--worker-urls", "grpc://a:1,grpc://b:2"}, []string{"grpc://a:1", "grpc://b:2"}},
		{"repeated", []string{"--worker-urls", "a:1", "--worker-urls=b:2"}, []string{"a:1", "b:2"}},
		{"single dash", []string{"-worker-urls", "a:1", "b:2"}, []string{"a:1", "b:2"}},
		{"at the end", []string{"--policy", "random", "--worker-urls", "a:1", "b:2"}, []string{"a:1", "b:2"}},
		{"absent", []string{"--policy", "random"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			var urls listFlag
			fs.Var(&urls, "worker-urls", "")
			fs.String("policy", "", "")
			if err := fs.Parse(joinMultiValues(tc.args, "worker-urls")); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(urls, tc.want) {
				t.Fatalf("worker-urls = %q, want %q", urls, tc.want)
			}
			if fs.NArg() != 0 {
				t.Fatalf("left over arguments %q", fs.Args())
			}
		})
	}
}
