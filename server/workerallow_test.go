package server

import (
	"strings"
	"testing"
)

func TestWorkerAllow(t *testing.T) {
	tests := []struct {
		patterns []string
		host     string
		want     bool
	}{
		{nil, "127.0.0.1", false},
		{[]string{"127.0.0.1"}, "127.0.0.1", true},
		{[]string{"127.0.0.1"}, "127.0.0.2", false},
		{[]string{"127.0.0.1"}, "localhost", false}, // names never match IPs
		{[]string{"10.0.0.0/8"}, "10.200.1.2", true},
		{[]string{"10.0.0.0/8"}, "11.0.0.1", false},
		{[]string{"10.0.0.0/8"}, "::ffff:10.0.0.1", true}, // IPv4-mapped is the IPv4 address
		{[]string{"fd00::/8"}, "fd12::1", true},
		{[]string{"[::1]"}, "::1", true},
		{[]string{"engine-0.llm.svc"}, "ENGINE-0.llm.svc", true},
		{[]string{"engine-0.llm.svc"}, "engine-0.llm.svc.", true},
		{[]string{"engine-0.llm.svc"}, "engine-1.llm.svc", false},
		{[]string{"*.llm.svc.cluster.local"}, "p-1.engines.llm.svc.cluster.local", true},
		{[]string{"*.llm.svc.cluster.local"}, "llm.svc.cluster.local", false},
		{[]string{"*.llm.svc.cluster.local"}, "evil-llm.svc.cluster.local", false},
		{[]string{"*.llm.svc"}, "10.0.0.1", false}, // and patterns never match IPs
		{[]string{"*"}, "anything.example", true},
		{[]string{"*"}, "10.0.0.1", true},
	}
	for _, tt := range tests {
		a, err := ParseWorkerAllow(tt.patterns)
		if err != nil {
			t.Fatalf("ParseWorkerAllow(%q): %v", tt.patterns, err)
		}
		if got := a.Allows(tt.host); got != tt.want {
			t.Errorf("%q allows %q: %v, want %v", tt.patterns, tt.host, got, tt.want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "a*.b", "*.", "host:80", "*.a*.b", "x@y"} {
		if _, err := ParseWorkerAllow([]string{bad}); err == nil || !strings.Contains(err.Error(), "--admin-worker-allow") {
			t.Errorf("ParseWorkerAllow(%q): %v, want an error naming --admin-worker-allow", bad, err)
		}
	}
	var none *WorkerAllow
	if none.Allows("127.0.0.1") {
		t.Error("a nil WorkerAllow allows a host")
	}
}
