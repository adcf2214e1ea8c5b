// Package realengine_test puts kvgate in front of two real vLLM engines (the
// CPU build from PyPI serving a tiny model built offline) and checks what
// kvgate does against what the engines themselves do.
//
// It runs only when KVGATE_REAL_ENGINES names a directory prepared by
// `make real-engines` (vllm-venv/ with vLLM and its gRPC servicer, and
// tiny-qwen3/, the model); otherwise every test skips, so `make test` needs
// no Python. TestMain starts the two engines and `kvgate serve` in front of
// them as separate processes, over loopback, as a user would.
package realengine_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	gbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// envVar names the prepared directory; unset, the tests skip.
const envVar = "KVGATE_REAL_ENGINES"

// modelName is what the engines serve the tiny model as.
const modelName = "tiny-qwen3"

// blockSize is the engines' KV block size; kvgate is not told it, it learns
// it from their GetServerInfo.
// vLLM's CPU attention takes multiples of 32 only ("No common block size for
// 16 (CPU_ATTN: [MultipleOf(32)])").
const blockSize = 32

// engineStartTimeout bounds an engine's start: loading vLLM on a 2-core
// machine shared with other builds took 10 to more than 15 minutes.
const engineStartTimeout = 25 * time.Minute

// attachVar, for working on the tests, names engines already running
// (host:port,host:port, started as engineArgs does, their ZMQ publisher on
// port+1 and its replay socket on port+2) instead of starting them; the test
// that kills and restarts one then skips.
const attachVar = "KVGATE_REAL_ENGINES_ATTACH"

// suite is what TestMain started; nil when the tests skip.
var suite *realSuite

func TestMain(m *testing.M) {
	dir := os.Getenv(envVar)
	if dir == "" {
		os.Exit(m.Run())
	}
	s, err := startSuite(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "real engines: %v\n", err)
		if s != nil {
			s.stop()
		}
		os.Exit(1)
	}
	suite = s
	code := m.Run()
	s.stop()
	os.Exit(code)
}

// realSuite is two vLLM engines and two kvgates in front of them: the one
// the tests use (its embedded front), which takes the engines' KV events
// from SubscribeKvEvents, and zmq, which takes them from the engines' ZMQ
// publishers instead.
type realSuite struct {
	dir      string // KVGATE_REAL_ENGINES
	python   string // the venv's python
	model    string // the tiny model's directory
	logs     string // where every process writes its output
	bin      string // the kvgate binary
	engines  [2]*engine
	attached bool // the engines are someone else's: never kill them
	*front
	zmq *front
}

// front is one kvgate process and a client of it.
type front struct {
	p      *proc
	conn   *grpc.ClientConn
	router kvgatev1.RouterClient
	admin  kvgatev1.AdminClient
}

// env returns the running suite, or skips t when KVGATE_REAL_ENGINES is unset.
func env(t *testing.T) *realSuite {
	t.Helper()
	if suite == nil {
		t.Skipf("%s is not set: `make real-engines` prepares real vLLM engines and runs this test", envVar)
	}
	return suite
}

// proc is a process started in a group of its own, so that killing it kills
// the children it spawned (vLLM's engine core runs in one).
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProc(name, logDir string, env []string, argv ...string) (*proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// kill ends the process group at once (SIGKILL: a crash, not a shutdown) and
// waits for the leader.
func (p *proc) kill() {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail returns the last n lines of the process's log, for failure messages.
func (p *proc) tail(n int) string {
	f, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// engine is one vLLM gRPC server and the ports it was given, so it can be
// restarted on the same ones.
type engine struct {
	index     int
	port      int
	eventPort int // vLLM's ZMQ KV event publisher
	replay    int // and its replay socket
	p         *proc
	conn      *grpc.ClientConn
	client    vllm.VllmEngineClient
}

func (e *engine) url() string { return fmt.Sprintf("grpc://127.0.0.1:%d", e.port) }

// freePorts reserves n distinct loopback ports and releases them for the
// processes about to bind them.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func startSuite(dir string) (*realSuite, error) {
	s := &realSuite{
		dir:    dir,
		python: filepath.Join(dir, "vllm-venv", "bin", "python"),
		model:  filepath.Join(dir, "tiny-qwen3"),
	}
	for _, need := range []string{s.python, filepath.Join(s.model, "config.json")} {
		if _, err := os.Stat(need); err != nil {
			return nil, fmt.Errorf("%s=%s is not prepared (run make real-engines): %w", envVar, dir, err)
		}
	}
	logs, err := os.MkdirTemp("", "kvgate-real-engines-")
	if err != nil {
		return nil, err
	}
	s.logs = logs
	fmt.Fprintf(os.Stderr, "real engines: logs in %s\n", logs)
	ports, err := freePorts(3 * len(s.engines))
	if err != nil {
		return nil, err
	}
	for i := range s.engines {
		s.engines[i] = &engine{index: i, port: ports[3*i], eventPort: ports[3*i+1], replay: ports[3*i+2]}
	}
	if attach := os.Getenv(attachVar); attach != "" {
		if err := s.attach(attach); err != nil {
			return s, err
		}
		return s, s.startKvgates()
	}
	// Both engines load at once: on two cores most of their start is imports.
	errs := make([]error, len(s.engines))
	var wg sync.WaitGroup
	for i, e := range s.engines {
		wg.Go(func() { errs[i] = s.startEngineFresh(e) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return s, err
	}
	return s, s.startKvgates()
}

// engineArgs is the command line of one vLLM gRPC server: the tiny model in
// float32 (these CPUs may lack BF16), prefix caching and KV events (ZMQ,
// which the gRPC servicer relays as SubscribeKvEvents) on. The publisher
// binds only an endpoint of the form tcp://*:PORT; with a host it connects.
func (s *realSuite) engineArgs(e *engine) []string {
	events := fmt.Sprintf(`{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:%d", "replay_endpoint": "tcp://*:%d"}`,
		e.eventPort, e.replay)
	return []string{s.python, "-m", "vllm.entrypoints.launchers.grpc_server",
		"--model", s.model, "--served-model-name", modelName,
		"--host", "127.0.0.1", "--port", fmt.Sprint(e.port),
		"--dtype", "float32", "--max-model-len", "4096", "--block-size", fmt.Sprint(blockSize),
		"--enable-prefix-caching", "--enforce-eager", "--max-num-seqs", "16",
		"--kv-events-config", events,
		// Random weights would pad JSON with white space until max_tokens.
		"--structured-outputs-config", `{"backend": "xgrammar", "disable_any_whitespace": true}`,
	}
}

// engineEnv keeps each engine small: 1 GiB of KV cache, one compute thread,
// no usage reporting.
var engineEnv = []string{
	"VLLM_CPU_KVCACHE_SPACE=1", "VLLM_CPU_OMP_THREADS_BIND=nobind", "OMP_NUM_THREADS=1",
	"VLLM_NO_USAGE_STATS=1", "DO_NOT_TRACK=1", "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1",
}

// attach takes the engines at addrs (host:port,host:port) instead of starting
// them.
func (s *realSuite) attach(addrs string) error {
	parts := strings.Split(addrs, ",")
	if len(parts) != len(s.engines) {
		return fmt.Errorf("%s=%q: want %d host:port", attachVar, addrs, len(s.engines))
	}
	s.attached = true
	for i, a := range parts {
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			return fmt.Errorf("%s: %w", attachVar, err)
		}
		e := s.engines[i]
		if _, err := fmt.Sscan(port, &e.port); err != nil {
			return fmt.Errorf("%s: %w", attachVar, err)
		}
		e.eventPort, e.replay = e.port+1, e.port+2
		if err := s.dialEngine(s.engines[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *realSuite) dialEngine(e *engine) error {
	if e.conn != nil {
		return nil
	}
	// Redial at least every second: the engine refuses connections for the
	// minutes it loads, and gRPC's default backoff would then wait up to two
	// minutes after it is ready.
	backoff := grpc.ConnectParams{Backoff: gbackoff.DefaultConfig, MinConnectTimeout: 5 * time.Second}
	backoff.Backoff.MaxDelay = time.Second
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", e.port),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithConnectParams(backoff))
	if err != nil {
		return err
	}
	e.conn, e.client = conn, vllm.NewVllmEngineClient(conn)
	return nil
}

// startEngineFresh starts e for the first time, and once more on new ports
// if one of its ports was taken before it could bind it ("Address already
// in use"): freePorts releases the ports it reserves for the engine to
// bind, and meanwhile any process may take one: a CI run lost engine 1's
// KV event port so, most likely to engine 0, which binds ports of its own
// as it starts beside it.
func (s *realSuite) startEngineFresh(e *engine) error {
	err := s.startEngine(e)
	if err == nil || e.p == nil || !logSays(e.p.log, "Address already in use") {
		return err
	}
	e.p.kill()
	if e.conn != nil {
		e.conn.Close()
		e.conn, e.client = nil, nil
	}
	ports, perr := freePorts(3)
	if perr != nil {
		return errors.Join(err, perr)
	}
	fmt.Fprintf(os.Stderr, "real engines: engine %d lost a port before binding it; starting it again on new ones\n", e.index)
	e.port, e.eventPort, e.replay = ports[0], ports[1], ports[2]
	return s.startEngine(e)
}

// logSays reports whether the log at path contains text.
func logSays(path, text string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), text)
}

// startEngine starts (or restarts) e and waits until it answers HealthCheck.
func (s *realSuite) startEngine(e *engine) error {
	p, err := startProc(fmt.Sprintf("vllm-%d", e.index), s.logs, engineEnv, s.engineArgs(e)...)
	if err != nil {
		return err
	}
	e.p = p
	if err := s.dialEngine(e); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), engineStartTimeout)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := e.client.HealthCheck(cctx, &vllm.HealthCheckRequest{})
		ccancel()
		if err == nil && r.GetHealthy() {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("engine %d exited while starting:\n%s", e.index, p.tail(40))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("engine %d not healthy after %v (last: %v, %v):\n%s", e.index, engineStartTimeout, r, err, p.tail(40))
		case <-time.After(time.Second): // an outside process: nothing to wait on but its answer
		}
	}
}

// startKvgates builds kvgate (or takes KVGATE_BIN) and starts the two
// fronts.
func (s *realSuite) startKvgates() error {
	s.bin = os.Getenv("KVGATE_BIN")
	if s.bin == "" {
		s.bin = filepath.Join(s.logs, "kvgate")
		build := exec.Command("go", "build", "-o", s.bin, "github.com/kvgate/kvgate/cmd/kvgate")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("go build kvgate: %w\n%s", err, out)
		}
	}
	var err error
	if s.front, err = s.startKvgateFresh("kvgate"); err != nil {
		return err
	}
	// The engines' publishers bind (tcp://*:PORT); kvgate connects.
	var zmqFlags []string
	for _, e := range s.engines {
		zmqFlags = append(zmqFlags, "--kv-events-zmq",
			fmt.Sprintf("%s=tcp://127.0.0.1:%d?replay=tcp://127.0.0.1:%d", e.url(), e.eventPort, e.replay))
	}
	s.zmq, err = s.startKvgateFresh("kvgate-zmq", zmqFlags...)
	return err
}

// startKvgateFresh reserves a gRPC and a Prometheus port for one kvgate
// just before starting it, and starts it again on new ones if either was
// taken in between ("address already in use"). A CI run lost kvgate's
// Prometheus port when the ports were reserved before the engines' minutes
// of start-up, during which they bind ports of their own.
func (s *realSuite) startKvgateFresh(name string, extra ...string) (*front, error) {
	const attempts = 3
	for try := 1; ; try++ {
		ports, err := freePorts(2)
		if err != nil {
			return nil, err
		}
		f, err := s.startKvgate(name, ports[0], ports[1], extra...)
		if err == nil || try == attempts || f == nil || !logSays(f.p.log, "address already in use") {
			return f, err
		}
		f.stop()
		fmt.Fprintf(os.Stderr, "real engines: %s lost a port before binding it; starting it again on new ones\n", name)
	}
}

// startKvgate starts one kvgate in front of both engines, with no tokenizer
// of its own (it fetches the engines'), and waits until both workers are
// healthy.
func (s *realSuite) startKvgate(name string, port, promPort int, extra ...string) (*front, error) {
	urls := s.engines[0].url() + "," + s.engines[1].url()
	args := append([]string{s.bin, "serve",
		"--worker-urls", urls, "--wait-for-workers",
		"--port", fmt.Sprint(port), "--prometheus-port", fmt.Sprint(promPort),
		"--policy", "cache_aware",
		"--health-check-interval", "1s", "--health-success-threshold", "1",
		"--log-level", "debug"}, extra...)
	p, err := startProc(name, s.logs, nil, args...)
	if err != nil {
		return nil, err
	}
	f := &front{p: p}
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return f, err
	}
	f.conn, f.router, f.admin = conn, kvgatev1.NewRouterClient(conn), kvgatev1.NewAdminClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		ws, err := f.admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
		if err == nil && len(ws.GetWorkers()) == 2 && healthyAll(ws.GetWorkers()) {
			return f, nil
		}
		if p.exited() {
			return f, fmt.Errorf("%s exited:\n%s", name, p.tail(40))
		}
		select {
		case <-ctx.Done():
			return f, fmt.Errorf("%s's workers not ready (%v, %v):\n%s", name, ws, err, p.tail(40))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func healthyAll(ws []*kvgatev1.Worker) bool {
	for _, w := range ws {
		if w.GetHealth() != kvgatev1.Health_HEALTH_HEALTHY || w.GetConnecting() {
			return false
		}
	}
	return true
}

func (s *realSuite) stop() {
	for _, f := range []*front{s.front, s.zmq} {
		f.stop()
	}
	for _, e := range s.engines {
		if e != nil {
			if !s.attached {
				e.p.kill()
			}
			if e.conn != nil {
				e.conn.Close()
			}
		}
	}
}

func (f *front) stop() {
	if f == nil {
		return
	}
	f.p.kill()
	if f.conn != nil {
		f.conn.Close()
	}
}
