package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// The deployment examples (the Kubernetes manifests, the Containerfiles'
// default command and the `kvgate serve` command lines of README,
// docs/fleets.md and docs/deployment.md) name flags that only the binary
// defines; this holds them to `kvgate serve`'s real flag set, so a renamed
// or removed flag breaks the test and not a user's deploy.
func TestDeployExamplesUseRealServeFlags(t *testing.T) {
	sources := []struct {
		path    string
		extract func(string) []string
		// must lists flags the source is known to use, so that an extractor
		// that silently finds nothing fails instead of passing.
		must []string
	}{
		{"../../deploy/kubernetes/sidecar.yaml", func(s string) []string { return manifestFlags(s, "kvgate") },
			[]string{"host", "prometheus-host", "worker-urls", "worker-protocol"}},
		{"../../deploy/kubernetes/gateway.yaml", func(s string) []string { return manifestFlags(s, "kvgate") },
			[]string{"pd-disaggregation", "service-discovery", "service-discovery-namespace", "prefill-selector", "decode-selector", "service-discovery-port"}},
		{"../../Containerfile", containerfileFlags, []string{"host", "prometheus-host"}},
		{"../../Containerfile.multistage", containerfileFlags, []string{"host", "prometheus-host"}},
		{"../../README.md", readmeServeFlags, []string{"worker-urls", "policy", "otlp-endpoint"}},
		{"../../docs/fleets.md", readmeServeFlags, []string{"pd-disaggregation", "decode", "enable-igw", "dp-aware", "worker-urls"}},
		{"../../docs/deployment.md", readmeServeFlags, []string{"host", "prometheus-host", "admin-port", "worker-urls",
			"pd-disaggregation", "service-discovery", "prefill-selector", "decode-selector", "service-discovery-port"}},
	}
	known := serveFlagNames()
	for _, src := range sources {
		t.Run(src.path, func(t *testing.T) {
			b, err := os.ReadFile(src.path)
			if err != nil {
				t.Fatal(err)
			}
			got := src.extract(string(b))
			for _, name := range src.must {
				if !slices.Contains(got, name) {
					t.Errorf("found no --%s in %s (flags found: %v): has the example or the extractor changed?", name, src.path, got)
				}
			}
			for _, name := range got {
				if !known[name] {
					t.Errorf("%s uses --%s, which kvgate serve does not define", src.path, name)
				}
			}
		})
	}
}

// serveFlagNames builds the flag set as runServe does (serveConfig.register)
// and returns its names.
func serveFlagNames() map[string]bool {
	var cfg serveConfig
	fs := flag.NewFlagSet("kvgate serve", flag.ContinueOnError)
	cfg.register(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}

var longFlag = regexp.MustCompile(`(?:^|[\s"'\[,])--([a-z][a-z0-9-]*)`)

// flagNames returns the names of the --flags in s, in order, without repeats.
func flagNames(s string) []string {
	var names []string
	for _, m := range longFlag.FindAllStringSubmatch(s, -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	return names
}

var containerItem = regexp.MustCompile(`^(\s*)- name: (\S+)\s*$`)

// manifestFlags returns the flags in the body of the container named
// container, in every document of a Kubernetes manifest: the lines after its
// "- name:" item that are indented deeper than the item's dash. It reads the
// manifest as text so that the repository needs no YAML library for it.
func manifestFlags(manifest, container string) []string {
	return flagNames(manifestBody(manifest, container))
}

// manifestBody returns the lines of the container named container, in every
// document of a manifest (see manifestFlags).
func manifestBody(manifest, container string) string {
	var body strings.Builder
	in, indent := false, 0
	for _, line := range strings.Split(manifest, "\n") {
		if m := containerItem.FindStringSubmatch(line); m != nil {
			in, indent = m[2] == container, len(m[1])
			continue
		}
		if !in {
			continue
		}
		trimmed := strings.TrimLeft(line, " ")
		if trimmed != "" && len(line)-len(trimmed) <= indent {
			in = false
			continue
		}
		body.WriteString(line + "\n")
	}
	return body.String()
}

var manifestArg = regexp.MustCompile(`(?m)^\s*-\s+"?(--[^"\s]+)"?\s*$`)

// manifestArgs returns the --flag=value items of the container's args list.
func manifestArgs(manifest, container string) []string {
	var args []string
	for _, m := range manifestArg.FindAllStringSubmatch(manifestBody(manifest, container), -1) {
		args = append(args, m[1])
	}
	return args
}

// containerfileCmd returns the arguments of a Containerfile's CMD (JSON form).
func containerfileCmd(t *testing.T, s string) []string {
	for _, line := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(line, "CMD "); ok {
			var args []string
			if err := json.Unmarshal([]byte(rest), &args); err != nil {
				t.Fatalf("CMD %s: %v", rest, err)
			}
			return args
		}
	}
	t.Fatal("no CMD")
	return nil
}

// The image's default command and the Kubernetes manifests serve Router on
// every interface; none of them may serve Admin there without an Admin key
// (kvgate would refuse to start), and each keeps Admin on loopback.
func TestDeployExamplesKeepAdminOffThePublicPort(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	sources := map[string][]string{
		"Containerfile":            containerfileCmd(t, read("../../Containerfile"))[1:],
		"Containerfile.multistage": containerfileCmd(t, read("../../Containerfile.multistage"))[1:],
		"sidecar.yaml":             manifestArgs(read("../../deploy/kubernetes/sidecar.yaml"), "kvgate"),
		"gateway.yaml":             manifestArgs(read("../../deploy/kubernetes/gateway.yaml"), "kvgate"),
	}
	for name, args := range sources {
		t.Run(name, func(t *testing.T) {
			cfg := defaults(t, args...)
			if cfg.host != "0.0.0.0" {
				t.Fatalf("%s serves Router on %q; the check below assumes every interface (args %q)", name, cfg.host, args)
			}
			if err := cfg.resolveKeys(func(string) string { return "" }); err != nil {
				t.Fatal(err)
			}
			host := cfg.host
			if cfg.adminPort >= 0 {
				host = cfg.adminHost
			}
			if err := cfg.adminExposure(host); err != nil {
				t.Fatalf("%s: kvgate would refuse to start: %v", name, err)
			}
			if cfg.adminPort < 0 || !loopbackHost(cfg.adminHost) {
				t.Errorf("%s serves Admin on %s port %d, want a loopback port of its own", name, cfg.adminHost, cfg.adminPort)
			}
		})
	}
}

// containerfileFlags returns the flags of a Containerfile's CMD and
// ENTRYPOINT instructions, the arguments kvgate runs with; the build's own
// options (podman's --build-arg, COPY --from) are not kvgate's.
func containerfileFlags(s string) []string {
	var cmds strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "CMD ") || strings.HasPrefix(line, "ENTRYPOINT ") {
			cmds.WriteString(line + "\n")
		}
	}
	return flagNames(cmds.String())
}

var serveCommand = regexp.MustCompile(`kvgate\S*\s+serve(?:\s|$)`)

// readmeServeFlags returns the flags of every `kvgate serve` command line in
// README's fenced code blocks (`go run ./cmd/kvgate serve` and `podman run
// IMAGE serve` included), continuation lines joined and shell comments cut.
func readmeServeFlags(readme string) []string {
	var cmds strings.Builder
	inBlock := false
	for _, line := range strings.Split(strings.ReplaceAll(readme, "\\\n", " "), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if loc := serveCommand.FindStringIndex(line); loc != nil {
			cmds.WriteString(line[loc[1]:] + "\n")
		}
	}
	return flagNames(cmds.String())
}

// The extractors find what they should and nothing else; the test above
// relies on them.
func TestDeployFlagExtractors(t *testing.T) {
	tests := []struct {
		name    string
		extract func(string) []string
		in      string
		want    []string
	}{
		{"manifest: only the named container", func(s string) []string { return manifestFlags(s, "kvgate") }, `
      containers:
        - name: kvgate
          args:
            - serve
            - --host=0.0.0.0
            - --no-such-flag
        - name: engine
          args: ["--model-path=/m", "--grpc-mode"]
      volumes:
        - name: kvgate
          emptyDir: {}
`, []string{"host", "no-such-flag"}},
		{"manifest: flow-style args", func(s string) []string { return manifestFlags(s, "kvgate") }, `
  - name: kvgate
    args: ["serve", "--worker-urls", "grpc://127.0.0.1:1"]
  - name: other
    args: ["--other"]
`, []string{"worker-urls"}},
		{"containerfile: CMD and ENTRYPOINT only", containerfileFlags, `
# podman build --build-arg VERSION=1 --host-comment
COPY --from=build /out/kvgate /kvgate
ENTRYPOINT ["/kvgate", "--entry"]
CMD ["serve", "--host=0.0.0.0", "--prometheus-host=0.0.0.0"]
`, []string{"entry", "host", "prometheus-host"}},
		{"readme: serve lines in code blocks", readmeServeFlags, "`kvgate serve --prose-flag`\n" + "```sh\n" +
			"kvgate serve --policy round_robin \\\n    --decode a b   # --commented\n" +
			"kvgate sim --protocol vllm\n" +
			"go run ./cmd/kvgate serve --pd-disaggregation\n" +
			"podman run --rm -p 1:1 localhost/kvgate:latest serve --host=0.0.0.0\n" +
			"grpcurl -plaintext localhost:30000 list\n" + "```\n",
			[]string{"policy", "decode", "pd-disaggregation", "host"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.extract(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestImageServes checks a running kvgate image from outside the container:
// scripts/image-check.sh starts `kvgate serve` (the image's default command,
// the embedded simulated engines) with its gRPC port published and sets
// KVGATE_IMAGE_GRPC to it (and KVGATE_IMAGE_METRICS to the published
// metrics port). Elsewhere it is skipped.
func TestImageServes(t *testing.T) {
	target := os.Getenv("KVGATE_IMAGE_GRPC")
	if target == "" {
		t.Skip("KVGATE_IMAGE_GRPC is not set (scripts/image-check.sh sets it to a running container)")
	}
	// A bound on the whole check, should the container hang: not an
	// assertion on how fast it answers.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// The router is SERVING once a worker is healthy; Watch reports each
	// change, so no polling interval is needed.
	for _, service := range []string{"", "kvgate.v1.Router"} {
		watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatalf("health %q: %v", service, err)
		}
		for {
			res, err := watch.Recv()
			if err != nil {
				t.Fatalf("health %q never SERVING: %v", service, err)
			}
			if res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				break
			}
		}
	}

	// Admin is on the container's loopback only (--admin-port=30001): the
	// published gRPC port does not serve it.
	if _, err := kvgatev1.NewAdminClient(conn).RemoveWorker(ctx, &kvgatev1.RemoveWorkerRequest{Address: "x:1"}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Admin on the published port: %v, want UNIMPLEMENTED", err)
	}

	stream, err := kvgatev1.NewRouterClient(conn).Generate(ctx, &kvgatev1.GenerateRequest{
		InputIds:       []uint32{1, 2, 3, 4, 5, 6, 7, 8},
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto.Uint32(8), IgnoreEos: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	var complete *kvgatev1.GenerateComplete
	for {
		res, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		if c := res.GetComplete(); c != nil {
			complete = c
		}
	}
	if complete == nil {
		t.Fatal("Generate ended without a completion")
	}
	if len(complete.GetOutputIds()) != 8 || complete.GetWorker() == "" {
		t.Errorf("Generate completed with %d ids on worker %q, want 8 on a named worker", len(complete.GetOutputIds()), complete.GetWorker())
	}

	if metrics := os.Getenv("KVGATE_IMAGE_METRICS"); metrics != "" {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metrics+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "\nkvgate_requests_total{") {
			t.Errorf("GET /metrics: %s, and no kvgate_requests_total after a Generate:\n%.500s", res.Status, body)
		}
	}
}

// rbac.yaml grants what service discovery uses (get, list and watch on
// pods) in both its variants, to the service account gateway.yaml runs as.
func TestRBACManifestCoversServiceDiscovery(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---\n")
	kinds := map[string]int{}
	for _, doc := range docs {
		kind := regexp.MustCompile(`(?m)^kind: (\S+)$`).FindStringSubmatch(doc)
		if kind == nil {
			t.Fatalf("a document without a kind:\n%s", doc)
		}
		kinds[kind[1]]++
		if kind[1] == "ClusterRole" || kind[1] == "Role" {
			if !strings.Contains(doc, `resources: ["pods"]`) || !strings.Contains(doc, `verbs: ["get", "list", "watch"]`) {
				t.Errorf("the %s does not grant get, list and watch on pods:\n%s", kind[1], doc)
			}
		}
		if (kind[1] == "ClusterRoleBinding" || kind[1] == "RoleBinding") && !strings.Contains(doc, "name: kvgate\n") {
			t.Errorf("the %s does not bind the kvgate service account:\n%s", kind[1], doc)
		}
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if kinds[k] != 1 {
			t.Errorf("rbac.yaml has %d %s documents, want 1", kinds[k], k)
		}
	}
	g, err := os.ReadFile("../../deploy/kubernetes/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(g), "serviceAccountName: kvgate\n") {
		t.Error("gateway.yaml does not run as rbac.yaml's service account kvgate")
	}
}
