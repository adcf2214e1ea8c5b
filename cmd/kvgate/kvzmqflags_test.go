package main

import (
	"strings"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// TestParseKVEventsZMQ: --kv-events-zmq pairs a worker, named as
// --worker-urls names it, with its publisher, and refuses what cannot work
// with a message naming the flag.
func TestParseKVEventsZMQ(t *testing.T) {
	for _, tc := range []struct {
		in         string
		worker     string
		want       workers.ZMQEventConfig
		wantErrHas string
	}{
		{in: "127.0.0.1:50051=tcp://127.0.0.1:5557", worker: "grpc://127.0.0.1:50051",
			want: workers.ZMQEventConfig{Endpoint: "tcp://127.0.0.1:5557"}},
		{in: "grpc://10.0.0.5:50051=tcp://10.0.0.5:5557?replay=tcp://10.0.0.5:5558&topic=kv", worker: "grpc://10.0.0.5:50051",
			want: workers.ZMQEventConfig{Endpoint: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558", Topic: "kv"}},
		{in: "grpc://10.0.0.5:50051=tcp://*:5557", worker: "grpc://10.0.0.5:50051",
			want: workers.ZMQEventConfig{Endpoint: "tcp://*:5557"}},
		{in: "grpc://10.0.0.5:50051=tcp://10.0.0.9:5557?bind=true", worker: "grpc://10.0.0.5:50051",
			want: workers.ZMQEventConfig{Endpoint: "tcp://10.0.0.9:5557", Bind: true}},
		{in: "grpc://10.0.0.5:50051=tcp://10.0.0.9:5557?bind=maybe", wantErrHas: "want true or false"},
		{in: "tcp://10.0.0.5:5557", wantErrHas: "want WORKER=tcp://"},
		{in: "grpc://10.0.0.5:50051=tcp://10.0.0.5", wantErrHas: "is not tcp://host:port"},
		{in: "grpc://10.0.0.5:50051=tcp://10.0.0.5:5557?replay=tcp://*:5558", wantErrHas: "give its host"},
		{in: "grpc://10.0.0.5:50051=tcp://10.0.0.5:5557?hwm=10", wantErrHas: `unknown option "hwm"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			srcs, err := zmqSources([]string{tc.in})
			if tc.wantErrHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrHas) || !strings.Contains(err.Error(), "--kv-events-zmq") {
					t.Fatalf("err = %v, want one naming --kv-events-zmq and containing %q", err, tc.wantErrHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			worker, cfg, _ := parseZMQSource(tc.in)
			if worker != tc.worker || cfg != tc.want || srcs[tc.worker] == nil {
				t.Errorf("worker %q config %+v, want %q %+v", worker, cfg, tc.worker, tc.want)
			}
		})
	}
	if _, err := zmqSources([]string{"h:1=tcp://h:2", "grpc://h:1=tcp://h:3"}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a worker given twice: err = %v", err)
	}
}
