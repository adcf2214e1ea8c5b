package server_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// grpcurlCall is a `grpcurl -d '{…}' … kvgate.v1.Service/Method` line of
// README or the docs it links (api.md, fleets.md), with the code its
// comment says it ends with ("# Code: X").
var grpcurlCall = regexp.MustCompile(`(?s)grpcurl -plaintext -d '([^']*)'[\s\\]*\S+ (kvgate\.v1\.\w+/\w+)([^\n]*)`)

// The grpcurl examples of README and the docs it links are requests kvgate
// accepts: each body is its method's request message in JSON, and the
// Generate, Chat and Embed ones succeed against simulated engines with the simulator's tokenizer (or
// fail with the code their comment names); those that name a model belong
// to a many-model router and are only parsed.
func TestREADMEGrpcurlExamples(t *testing.T) {
	var calls [][]string
	for _, path := range []string{"../README.md", "../docs/api.md", "../docs/fleets.md"} {
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		found := grpcurlCall.FindAllStringSubmatch(string(doc), -1)
		if len(found) == 0 {
			t.Fatalf("found %d grpcurl examples with a body in %s; the pattern no longer matches it", len(found), path)
		}
		calls = append(calls, found...)
	}
	f := startFleet(t, fleetOptions{workers: 1, text: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range calls {
		body, method, comment := c[1], c[2], c[3]
		want := codes.OK
		if _, code, ok := strings.Cut(comment, "# Code: "); ok {
			if err := want.UnmarshalJSON([]byte(`"` + strings.ToUpper(camelToSnake(strings.TrimSpace(code))) + `"`)); err != nil {
				t.Fatalf("%s: comment %q: %v", method, comment, err)
			}
		}
		var req proto.Message
		switch method {
		case "kvgate.v1.Router/Generate":
			req = &kvgatev1.GenerateRequest{}
		case "kvgate.v1.Router/Chat":
			req = &kvgatev1.ChatRequest{}
		case "kvgate.v1.Router/Embed":
			req = &kvgatev1.EmbedRequest{}
		case "kvgate.v1.Admin/Explain":
			req = &kvgatev1.ExplainRequest{}
		default:
			t.Fatalf("an example calls %s, which this test does not know", method)
		}
		if err := protojson.Unmarshal([]byte(body), req); err != nil {
			t.Fatalf("%s: the body is not a %T: %v\n%s", method, req, err, body)
		}
		if strings.Contains(body, `"model"`) {
			continue // an example of a many-model router (IGW): parsed, not run here
		}
		var err error
		switch r := req.(type) {
		case *kvgatev1.GenerateRequest:
			_, err = f.generate(ctx, t, r)
		case *kvgatev1.ChatRequest:
			_, err = f.chat(ctx, t, r)
		case *kvgatev1.EmbedRequest:
			_, err = f.router.Embed(ctx, r)
		default:
			continue
		}
		if status.Code(err) != want {
			t.Errorf("%s %s: %v, want %v", method, body, err, want)
		}
	}
}

// camelToSnake turns grpcurl's code names (InvalidArgument) into the
// enum's (INVALID_ARGUMENT, after upper-casing).
func camelToSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}
