package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	_ "github.com/kvgate/kvgate/api/gen/kvgate/v1" // registers kvgate.v1's descriptors
)

// This file runs the shell commands of README's quick start the way a shell
// would read them and grpcurl and curl would send them, without either tool
// installed: a test must not depend on what a newcomer installs by hand.
// It knows the few forms README uses (variables, single and double quotes,
// pipes into grep, comments) and fails on anything else, so a new kind of
// command in the quick start gets a runner here rather than going untested.

// shellCommand is one command line: its pipeline stages, words unquoted and
// variables expanded, and the comment after it.
type shellCommand struct {
	line    string
	stages  [][]string
	comment string
}

// shellCommands reads the commands of a shell block: lines ending in a
// backslash continue on the next, blank lines and whole-line comments are
// skipped, and NAME=value lines set vars for the lines after them.
func shellCommands(block string, vars map[string]string) ([]shellCommand, error) {
	var out []shellCommand
	block = strings.ReplaceAll(block, "\\\n", " ")
	for _, line := range strings.Split(block, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		c, err := parseShellLine(trimmed, vars)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", trimmed, err)
		}
		if len(c.stages) == 1 && len(c.stages[0]) == 1 {
			if name, value, ok := strings.Cut(c.stages[0][0], "="); ok && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(name) {
				vars[name] = value
				continue
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// parseShellLine splits one line into words as a POSIX shell does for the
// forms README uses.
func parseShellLine(line string, vars map[string]string) (shellCommand, error) {
	c := shellCommand{line: line}
	var stage []string
	var word strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			stage = append(stage, word.String())
		}
		word.Reset()
		inWord = false
	}
	expand := func(s string, i int) (int, error) { // s[i] is '$'
		j := i + 1
		for j < len(s) && (s[j] == '_' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || j > i+1 && s[j] >= '0' && s[j] <= '9') {
			j++
		}
		name := s[i+1 : j]
		v, ok := vars[name]
		if !ok {
			return 0, fmt.Errorf("$%s is not set by a line before it", name)
		}
		word.WriteString(v)
		return j, nil
	}
	for i := 0; i < len(line); {
		ch := line[i]
		switch {
		case ch == ' ' || ch == '\t':
			endWord()
			i++
		case ch == '#' && !inWord:
			c.comment = strings.TrimSpace(line[i+1:])
			i = len(line)
		case ch == '|':
			endWord()
			c.stages = append(c.stages, stage)
			stage = nil
			i++
		case ch == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return c, fmt.Errorf("unterminated single quote")
			}
			word.WriteString(line[i+1 : i+1+end])
			inWord = true
			i += end + 2
		case ch == '"':
			inWord = true
			i++
			for {
				if i >= len(line) {
					return c, fmt.Errorf("unterminated double quote")
				}
				if line[i] == '"' {
					i++
					break
				}
				switch {
				case line[i] == '\\' && i+1 < len(line) && strings.IndexByte(`"\$`, line[i+1]) >= 0:
					word.WriteByte(line[i+1])
					i += 2
				case line[i] == '$':
					var err error
					if i, err = expand(line, i); err != nil {
						return c, err
					}
				default:
					word.WriteByte(line[i])
					i++
				}
			}
		case ch == '$':
			inWord = true
			var err error
			if i, err = expand(line, i); err != nil {
				return c, err
			}
		case ch == '\\' && i+1 < len(line):
			word.WriteByte(line[i+1])
			inWord = true
			i += 2
		default:
			word.WriteByte(ch)
			inWord = true
			i++
		}
	}
	endWord()
	c.stages = append(c.stages, stage)
	return c, nil
}

// shellRunner runs commands against a router; addr maps the host:port a
// command names to the one the router really listens on.
type shellRunner struct {
	addr func(hostport string) (string, error)
}

// run runs one command and returns what it printed.
func (r shellRunner) run(ctx context.Context, c shellCommand) (string, error) {
	var out string
	var err error
	switch first := c.stages[0]; first[0] {
	case "grpcurl":
		out, err = r.grpcurl(ctx, first[1:])
	case "curl":
		out, err = r.curl(ctx, first[1:])
	default:
		return "", fmt.Errorf("this test cannot run %q: teach quickshell_test.go", first[0])
	}
	if err != nil {
		return "", err
	}
	for _, stage := range c.stages[1:] {
		if len(stage) != 2 || stage[0] != "grep" {
			return "", fmt.Errorf("this test pipes only into grep PATTERN, not %q", stage)
		}
		re, err := regexp.Compile(stage[1])
		if err != nil {
			return "", err
		}
		var kept []string
		for _, l := range strings.Split(out, "\n") {
			if re.MatchString(l) {
				kept = append(kept, l)
			}
		}
		if len(kept) == 0 {
			return "", fmt.Errorf("grep %s matched nothing in:\n%s", stage[1], out)
		}
		out = strings.Join(kept, "\n")
	}
	return out, nil
}

// grpcurl sends what `grpcurl -plaintext [-d BODY] ADDR list|Service/Method`
// sends and prints the responses as grpcurl does (protojson, camelCase).
func (r shellRunner) grpcurl(ctx context.Context, args []string) (string, error) {
	var body string
	var pos []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-plaintext":
		case a == "-d" && i+1 < len(args):
			body = args[i+1]
			i++
		case strings.HasPrefix(a, "-"):
			return "", fmt.Errorf("grpcurl flag %s: teach quickshell_test.go", a)
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return "", fmt.Errorf("grpcurl wants an address and a method (or list), got %q", pos)
	}
	target, err := r.addr(pos[0])
	if err != nil {
		return "", err
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if pos[1] == "list" {
		return listServices(ctx, conn)
	}
	svc, name, ok := strings.Cut(pos[1], "/")
	if !ok {
		return "", fmt.Errorf("grpcurl method %q is not Service/Method", pos[1])
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return "", fmt.Errorf("service %s: %w", svc, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return "", fmt.Errorf("%s is not a service", svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return "", fmt.Errorf("%s has no method %s", svc, name)
	}
	in := dynamicpb.NewMessage(md.Input())
	if body != "" {
		if err := protojson.Unmarshal([]byte(body), in); err != nil {
			return "", fmt.Errorf("-d is not a %s: %w", md.Input().FullName(), err)
		}
	}
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}, "/"+svc+"/"+name)
	if err != nil {
		return "", err
	}
	if err := st.SendMsg(in); err != nil {
		return "", err
	}
	if err := st.CloseSend(); err != nil {
		return "", err
	}
	var out []string
	for {
		msg := dynamicpb.NewMessage(md.Output())
		err := st.RecvMsg(msg)
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
		b, err := protojson.MarshalOptions{Multiline: true}.Marshal(msg)
		if err != nil {
			return "", err
		}
		out = append(out, string(b))
		if !md.IsStreamingServer() {
			break
		}
	}
	return strings.Join(out, "\n"), nil
}

// listServices asks the server's reflection service for its services, as
// `grpcurl ADDR list` does.
func listServices(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	st, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return "", err
	}
	defer st.CloseSend()
	if err := st.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		return "", err
	}
	resp, err := st.Recv()
	if err != nil {
		return "", err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return strings.Join(names, "\n"), nil
}

// curl sends what `curl -s [-H HEADER] [-d BODY] URL` sends (POST with a
// body, else GET) and prints the response body; a status of 400 or more
// fails, since README shows none.
func (r shellRunner) curl(ctx context.Context, args []string) (string, error) {
	var body, url string
	var headers []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-s":
		case (a == "-d" || a == "-H") && i+1 < len(args):
			if a == "-d" {
				body = args[i+1]
			} else {
				headers = append(headers, args[i+1])
			}
			i++
		case strings.HasPrefix(a, "-"):
			return "", fmt.Errorf("curl flag %s: teach quickshell_test.go", a)
		default:
			url = a
		}
	}
	hostport, path, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
	target, err := r.addr(hostport)
	if err != nil {
		return "", err
	}
	method := http.MethodGet
	if body != "" {
		method = http.MethodPost
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+target+"/"+path, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode >= 400 {
		return "", fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	return string(b), nil
}

// jsonValues decodes what a command printed: one or more JSON documents
// (grpcurl prints one per message); nil when it is not JSON.
func jsonValues(out string) []any {
	dec := json.NewDecoder(strings.NewReader(out))
	var vals []any
	for {
		var v any
		if err := dec.Decode(&v); err == io.EOF {
			return vals
		} else if err != nil {
			return nil
		}
		vals = append(vals, v)
	}
}

// walkJSON calls f on every object in v, depth first.
func walkJSON(v any, f func(map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		f(x)
		for _, e := range x {
			walkJSON(e, f)
		}
	case []any:
		for _, e := range x {
			walkJSON(e, f)
		}
	}
}
