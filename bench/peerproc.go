package bench

// The router processes of `kvgate bench --peers`: kvgate serve or SMG,
// started in front of a fleet, waited for, measured from /proc and stopped.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// routerReadyTimeout bounds a router's start: SMG loads the tokenizer and
// registers each worker through a workflow before it routes anything, which
// takes a few seconds on an idle machine and minutes on a starved one.
const routerReadyTimeout = 5 * time.Minute

// routerProc is a router running as a child process.
type routerProc struct {
	name string // "kvgate serve" or "smg launch"
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// startRouter starts the router of run in front of urls, serving model, and
// returns once it has routed a request.
func startRouter(ctx context.Context, pc PeerConfig, run peerRun, urls []string, model string) (*routerProc, front, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, nil, err
	}
	port, metrics := ports[0], ports[1]
	var p *routerProc
	var fr front
	switch run.router {
	case kvgateProcess:
		args := []string{"serve", "--host", "127.0.0.1", "--port", port,
			"--prometheus-port", metrics, "--worker-urls", strings.Join(urls, ","), "--policy", run.policy,
			"--wait-for-workers", "--worker-startup-timeout", "60s", "--log-level", "warn"}
		p, err = startProcess(pc, "kvgate serve", pc.Executable, append(args, pc.ServeArgs...)...)
		if err != nil {
			return nil, nil, err
		}
		g, err := dialRouters([]string{"127.0.0.1:" + port})
		if err != nil {
			p.stop()
			return nil, nil, err
		}
		fr = g
	case PeerSMG:
		args := []string{"launch", "--host", "127.0.0.1", "--port", port, "--worker-urls"}
		args = append(args, urls...)
		args = append(args, "--policy", run.policy, "--tokenizer-path", pc.TokenizerDir,
			"--prometheus-host", "127.0.0.1", "--prometheus-port", metrics, "--log-level", "warn")
		if p, err = startProcess(pc, "smg launch", pc.SMGBin, args...); err != nil {
			return nil, nil, err
		}
		fr = newSMGFront("http://127.0.0.1:"+port, model)
	default:
		return nil, nil, fmt.Errorf("no router %q", run.router)
	}
	if err := waitRouter(ctx, p, fr); err != nil {
		fr.close()
		p.stop()
		return nil, nil, err
	}
	return p, fr, nil
}

// startProcess runs exe args as a child, its output to pc.Stderr.
func startProcess(pc PeerConfig, name, exe string, args ...string) (*routerProc, error) {
	if exe == "" {
		return nil, fmt.Errorf("%s: no executable given", name)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = pc.Stderr, pc.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &routerProc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitRouter sends fr a one-token request until one succeeds, the process
// exits, or routerReadyTimeout passes.
func waitRouter(ctx context.Context, p *routerProc, fr front) error {
	probe := genRequest{prompt: []uint32{1, 2, 3, 4}, maxNew: 1}
	err := untilServes(ctx, routerReadyTimeout, p.done, func(ctx context.Context) error {
		_, err := fr.generate(ctx, 0, probe, func() {})
		return err
	})
	switch {
	case errors.Is(err, errExited):
		return fmt.Errorf("%s %w: its log is on stderr", p.name, err)
	case err != nil:
		return fmt.Errorf("%s %w", p.name, err)
	}
	return nil
}

// stop kills the process and waits for it: SMG's graceful shutdown on
// SIGTERM outlasts a benchmark's patience, and nothing is left to finish.
func (p *routerProc) stop() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *routerProc) cpu() (time.Duration, error) {
	d, err := processCPU(p.cmd.Process.Pid)
	if err != nil {
		return 0, fmt.Errorf("%s's CPU time: %w", p.name, err)
	}
	return d, nil
}

// peakRSS is the process's peak resident set in bytes (VmHWM in
// /proc/PID/status).
func (p *routerProc) peakRSS() (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("%s's peak memory: %w", p.name, err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s's peak memory: %q: %w", p.name, line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s's peak memory: no VmHWM in /proc/%d/status", p.name, p.cmd.Process.Pid)
}

// smgFront is SMG's native HTTP API: POST /generate with token ids, its
// answer streamed as server-sent events, one JSON object per event.
type smgFront struct {
	url, model string
	client     *http.Client
}

func newSMGFront(url, model string) *smgFront {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 4096, 4096
	t.DisableCompression = true
	return &smgFront{url: url, model: model, client: &http.Client{Transport: t}}
}

func (f *smgFront) replicas() int { return 1 }

func (f *smgFront) close() { f.client.CloseIdleConnections() }

// smgEvent is one streamed event of SMG's /generate. Each carries the new
// output ids and the usage so far; the last repeats the last ids with its
// finish_reason set, so ids beyond completion_tokens are not new.
type smgEvent struct {
	OutputIDs []uint32 `json:"output_ids"`
	MetaInfo  struct {
		FinishReason     json.RawMessage `json:"finish_reason"`
		PromptTokens     int             `json:"prompt_tokens"`
		CompletionTokens int             `json:"completion_tokens"`
		CachedTokens     int             `json:"cached_tokens"`
	} `json:"meta_info"`
	Error json.RawMessage `json:"error"`
}

func (f *smgFront) generate(ctx context.Context, _ int, g genRequest, tokens func()) (genResult, error) {
	sp := map[string]any{"max_new_tokens": g.maxNew, "ignore_eos": true}
	if g.seed != noSeed {
		sp["sampling_seed"] = g.seed
	}
	body, err := json.Marshal(map[string]any{
		"model":           f.model,
		"input_ids":       g.prompt,
		"stream":          true,
		"sampling_params": sp,
	})
	if err != nil {
		return genResult{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/generate", bytes.NewReader(body))
	if err != nil {
		return genResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return genResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return genResult{}, fmt.Errorf("smg /generate: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	var res genResult
	finished := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			break
		}
		var ev smgEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return genResult{}, fmt.Errorf("smg /generate: event %q: %w", data, err)
		}
		if len(ev.Error) > 0 {
			return genResult{}, fmt.Errorf("smg /generate: %s", ev.Error)
		}
		m := ev.MetaInfo
		if n := m.CompletionTokens - len(res.outputIDs); n > 0 && len(ev.OutputIDs) > 0 {
			res.outputIDs = append(res.outputIDs, ev.OutputIDs[:min(n, len(ev.OutputIDs))]...)
			tokens()
		}
		res.prompt, res.cached, res.completion = m.PromptTokens, m.CachedTokens, m.CompletionTokens
		if len(m.FinishReason) > 0 && string(m.FinishReason) != "null" {
			finished = true
		}
	}
	if err := sc.Err(); err != nil {
		return genResult{}, fmt.Errorf("smg /generate: %w", err)
	}
	if !finished {
		return genResult{}, errors.New("smg /generate: stream ended without a finish reason")
	}
	return res, nil
}
