package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// listenPprof opens --pprof-addr's listener. The endpoint runs CPU profiles
// and dumps goroutines and heap contents (request data among them) to anyone
// who reaches it, and kvgate has no authentication for it, so it listens on
// loopback only: the host must be 127.0.0.1, ::1 (or another loopback IP) or
// localhost, and the address the listener gets must be a loopback one (a
// localhost that resolves elsewhere is refused too). Reach it from elsewhere
// through kubectl port-forward or an SSH tunnel.
func listenPprof(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr %q: want host:port on loopback, e.g. 127.0.0.1:6060: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof-addr %q: the profiling endpoint has no authentication and serves only on loopback "+
			"(127.0.0.1, ::1 or localhost); reach it remotely through a port-forward or tunnel", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for pprof: %w", err)
	}
	if ta, ok := lis.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
		lis.Close()
		return nil, fmt.Errorf("--pprof-addr %q resolved to %s, which is not loopback", addr, lis.Addr())
	}
	return lis, nil
}

// servePprof serves the runtime's profiles under /debug/pprof/ on lis, on a
// mux of its own: importing net/http/pprof also registers its handlers on
// http.DefaultServeMux, which kvgate never serves. /debug/pprof/cmdline
// shows args (the process's command line) with the keys redacted.
func servePprof(lis net.Listener, args []string, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", cmdlineHandler(args))
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// No WriteTimeout: a CPU profile or trace answers after its ?seconds=.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("pprof server", "error", err)
		}
	}()
	return srv
}
