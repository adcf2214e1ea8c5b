package main

import "github.com/kvgate/kvgate/workers"

// healthProbeFlag is --health-check: what the health monitor asks each
// engine (see workers.HealthProbe).
type healthProbeFlag workers.HealthProbe

func (f *healthProbeFlag) String() string { return workers.HealthProbe(*f).String() }

func (f *healthProbeFlag) Set(s string) error {
	p, err := workers.ParseHealthProbe(s)
	if err != nil {
		return err
	}
	*f = healthProbeFlag(p)
	return nil
}

// healthCheckUsage is --health-check's help.
const healthCheckUsage = `what a health check asks each worker: "auto" (the engine's HealthCheck; when it answers UNIMPLEMENTED, or only empty messages and never healthy, grpc.health.v1 if served, else GetModelInfo), "engine" (HealthCheck must say healthy), "model-info" (GetModelInfo must answer), "grpc-health" (grpc.health.v1 must say SERVING) or "none" (only failing requests take a worker out)`
