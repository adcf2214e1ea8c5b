package main

// --kv-events-zmq names, per worker, the ZMQ publisher its engine sends its
// KV events to (vLLM's --kv-events-config publisher "zmq"), for engines
// whose gRPC server has no SubscribeKvEvents. The value pairs a worker, as
// --worker-urls names it, with the publisher's PUB endpoint, and carries the
// replay socket and the topic as a query, so that one value says all a
// worker needs:
//
//	grpc://10.0.0.5:50051=tcp://10.0.0.5:5557?replay=tcp://10.0.0.5:5558&topic=kv

import (
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// zmqSources turns the values of --kv-events-zmq into event sources keyed by
// worker URL.
func zmqSources(values []string) (map[string]workers.KVEventSource, error) {
	if len(values) == 0 {
		return nil, nil
	}
	out := make(map[string]workers.KVEventSource, len(values))
	for _, v := range values {
		worker, cfg, err := parseZMQSource(v)
		if err != nil {
			return nil, fmt.Errorf("--kv-events-zmq %q: %w", v, err)
		}
		src, err := workers.NewZMQEventSource(cfg)
		if err != nil {
			return nil, fmt.Errorf("--kv-events-zmq %q: %w", v, err)
		}
		if _, dup := out[worker]; dup {
			return nil, fmt.Errorf("--kv-events-zmq: worker %s is given twice", worker)
		}
		out[worker] = src
	}
	return out, nil
}

// parseZMQSource reads
// WORKER=tcp://host:port[?replay=tcp://host:port&topic=T&bind=true].
func parseZMQSource(v string) (string, workers.ZMQEventConfig, error) {
	var cfg workers.ZMQEventConfig
	worker, ep, ok := strings.Cut(v, "=tcp://")
	if !ok || worker == "" {
		return "", cfg, fmt.Errorf("want WORKER=tcp://host:port[?replay=tcp://host:port&topic=T&bind=true]")
	}
	name, err := workers.CanonicalName(worker)
	if err != nil {
		return "", cfg, fmt.Errorf("worker %q: %w", worker, err)
	}
	ep, query, _ := strings.Cut(ep, "?")
	cfg.Endpoint = "tcp://" + ep
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", cfg, fmt.Errorf("options %q: %w", query, err)
	}
	for k, vs := range q {
		switch k {
		case "replay":
			cfg.Replay = vs[len(vs)-1]
		case "topic":
			cfg.Topic = vs[len(vs)-1]
		case "bind":
			if cfg.Bind, err = strconv.ParseBool(vs[len(vs)-1]); err != nil {
				return "", cfg, fmt.Errorf("bind=%q: want true or false", vs[len(vs)-1])
			}
		default:
			return "", cfg, fmt.Errorf("unknown option %q (replay, topic, bind)", k)
		}
	}
	return name, cfg, cfg.Validate()
}

// simZMQFlags are `kvgate sim`'s flags for a ZMQ KV event publisher.
type simZMQFlags struct {
	endpoint, replay, topic, shape string
	skipEvery                      int
}

func (f *simZMQFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.endpoint, "kv-events-zmq", "", "also publish the KV events over ZMQ as vLLM does, on a PUB socket bound here (tcp://host:port); empty: gRPC only")
	fs.StringVar(&f.replay, "kv-events-zmq-replay", "", "with --kv-events-zmq: bind vLLM's ROUTER replay socket here (tcp://host:port); empty: none")
	fs.StringVar(&f.topic, "kv-events-zmq-topic", "", "with --kv-events-zmq: the topic of every message")
	fs.StringVar(&f.shape, "kv-events-zmq-shape", "map", "with --kv-events-zmq: map (current vLLM: tagged maps, 32-byte hashes) or array (earlier vLLM: tagged arrays, integer hashes)")
	fs.IntVar(&f.skipEvery, "kv-events-zmq-skip-every", 0, "fault: every n-th batch is kept for replay but not sent on the PUB socket (0: none)")
}

// start publishes s's events when --kv-events-zmq is given.
func (f *simZMQFlags) start(s *sim.Process, log *slog.Logger) (*sim.ZMQPublisher, error) {
	if f.endpoint == "" {
		return nil, nil
	}
	p, err := sim.StartZMQPublisher(s, sim.ZMQConfig{Endpoint: f.endpoint, Replay: f.replay, Topic: f.topic,
		Shape: sim.ZMQShape(f.shape), SkipEvery: f.skipEvery}, log)
	if err != nil {
		return nil, err
	}
	log.Info("ZMQ KV event publisher serving", "endpoint", p.Endpoint(), "replay", p.ReplayEndpoint(), "topic", f.topic)
	return p, nil
}
