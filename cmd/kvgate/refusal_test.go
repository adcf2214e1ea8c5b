package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/auth"
)

// A call without the right key is refused from its headers alone, before
// the router reads a byte of its request: every method of Router and Admin,
// unary and streaming, on the gRPC port and on Admin's own port. Each call
// here opens its stream and never sends the request message, so a router
// that waited for the message before authenticating would answer nothing
// until the bound below ended the call with DEADLINE_EXCEEDED. Refusals
// are still counted in kvgate_request_errors_total.
func TestRefusedBeforeTheRequestIsRead(t *testing.T) {
	l := startServe(t, "--api-key", "router-secret", "--admin-api-key", "admin-secret", "--admin-port", "0", "--prometheus-port", "0")
	dial := func(addr, key string) *grpc.ClientConn {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if key != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(auth.Bearer(key)))
		}
		c, err := grpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// A bound on the whole test, should a call never be answered: not an
	// assertion on how fast refusals are.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	type listener struct {
		name, addr string
		service    grpc.ServiceDesc
	}
	listeners := []listener{
		{"Router on the gRPC port", l.grpc, kvgatev1.Router_ServiceDesc},
		{"Admin on its own port", l.admin, kvgatev1.Admin_ServiceDesc},
	}
	keys := []struct{ name, key string }{{"no key", ""}, {"a wrong key", "guess"}, {"the other service's key", "router-secret"}}
	calls := 0
	for _, lis := range listeners {
		var methods []string
		for _, m := range lis.service.Methods {
			methods = append(methods, m.MethodName)
		}
		for _, s := range lis.service.Streams {
			methods = append(methods, s.StreamName)
		}
		for _, k := range keys {
			if k.key == "router-secret" && lis.service.ServiceName == kvgatev1.Router_ServiceDesc.ServiceName {
				continue // the Router key opens Router
			}
			conn := dial(lis.addr, k.key)
			for _, m := range methods {
				full := "/" + lis.service.ServiceName + "/" + m
				t.Run(lis.name+"/"+k.name+"/"+m, func(t *testing.T) {
					cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, full)
					if err == nil {
						err = cs.RecvMsg(&emptypb.Empty{})
					}
					if status.Code(err) != codes.Unauthenticated {
						t.Fatalf("%s with %s and no request sent: %v, want UNAUTHENTICATED at once", full, k.name, err)
					}
				})
				calls++
			}
		}
	}

	res, err := http.Get("http://" + l.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "kvgate_request_errors_total{") && strings.Contains(line, `code="Unauthenticated"`) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			refused += v
		}
	}
	if refused != float64(calls) {
		t.Errorf("kvgate_request_errors_total counts %v UNAUTHENTICATED calls, want the %d refused:\n%s", refused, calls, body)
	}
}
