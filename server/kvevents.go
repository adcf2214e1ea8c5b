package server

import (
	"github.com/kvgate/kvgate/workers"
)

// KVEventStatuser reports the KV event subscription of a worker, by URL
// (workers.KVSubscriptions does).
type KVEventStatuser = workers.KVStatuser

// KVEventMetrics returns the hooks a workers.KVSubscriptions feeds.
func (m *Metrics) KVEventMetrics() workers.KVEventMetrics { return m.kv.Hooks() }
