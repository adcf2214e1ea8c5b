package policy_test

import (
	"log/slog"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestMirrorsKVEventsMatchesThePolicies: the registry says which policies
// consume KV events without building them, and says it of exactly the
// policies that, built, are workers.KVEventHandlers.
func TestMirrorsKVEventsMatchesThePolicies(t *testing.T) {
	o := policy.DefaultOptions()
	o.Logger = slog.New(slog.DiscardHandler)
	for _, name := range policy.Names() {
		p, err := policy.New(name, o)
		if err != nil {
			t.Fatal(err)
		}
		_, handles := p.(workers.KVEventHandler)
		if got := policy.MirrorsKVEvents(name); got != handles {
			t.Errorf("MirrorsKVEvents(%q) = %v; built, it is a KVEventHandler: %v", name, got, handles)
		}
	}
	if policy.MirrorsKVEvents("no_such_policy") {
		t.Error("an unknown policy mirrors KV events")
	}
}
