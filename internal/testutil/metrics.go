package testutil

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Series collects c through a pedantic registry (which also checks that c
// describes what it collects) and returns the samples of the families
// named, one "name{label="value",...} value" line each, sorted; counters
// and gauges only.
func Series(t testing.TB, c prometheus.Collector, names ...string) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("registering the collector: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	var out []string
	for _, mf := range mfs {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			line := mf.GetName()
			if len(labels) > 0 {
				line += "{" + strings.Join(labels, ",") + "}"
			}
			out = append(out, fmt.Sprintf("%s %g", line, v))
		}
	}
	slices.Sort(out)
	return out
}
