package bench

// The processes of `kvgate bench --overhead --cpu`: ports for them, their
// CPU time, their logs and their tokenizer-cache counters.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// freePorts returns n ports free on loopback a moment ago (the children
// bind them; another process could take one in between, which fails the
// run rather than measuring something else).
func freePorts(n int) ([]string, error) {
	var ports []string
	var lis []net.Listener
	defer func() {
		for _, l := range lis {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("overhead --cpu: find a free port: %w", err)
		}
		lis = append(lis, l)
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}

// processCPU is the user + system CPU time of process pid so far, from
// /proc/PID/stat (fields 14 and 15, in clock ticks: USER_HZ, 100 on every
// Linux architecture). The kernel computes them from the process's exact
// run time, so their sum is exact to the tick.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, x := range f[11:13] {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	const userHZ = 100
	return time.Duration(ticks) * (time.Second / userHZ), nil
}

// cacheCounts are the router's tokenizer cache hit counters.
type cacheCounts struct{ l0, l1 float64 }

func (a cacheCounts) minus(b cacheCounts) cacheCounts { return cacheCounts{a.l0 - b.l0, a.l1 - b.l1} }

// cacheHits scrapes kvgate_tokenizer_cache_hits_total from the router.
func (r *cpuRig) cacheHits(ctx context.Context) (cacheCounts, error) {
	var c cacheCounts
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.metrics+"/metrics", nil)
	if err != nil {
		return c, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return c, fmt.Errorf("overhead --cpu: the router's metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for prefix, dst := range map[string]*float64{
			`kvgate_tokenizer_cache_hits_total{level="l0"} `: &c.l0,
			`kvgate_tokenizer_cache_hits_total{level="l1"} `: &c.l1,
		} {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				if *dst, err = strconv.ParseFloat(v, 64); err != nil {
					return c, fmt.Errorf("overhead --cpu: metrics line %q: %w", line, err)
				}
			}
		}
	}
	return c, sc.Err()
}
