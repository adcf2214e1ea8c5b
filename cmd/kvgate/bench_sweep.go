package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/bench"
)

// speeds is the value of --speed: replay speed-ups, comma-separated, each
// > 0 and none twice (two points at one speed would draw as one). A later
// --speed replaces an earlier one.
type speeds []float64

func (s *speeds) String() string {
	f := make([]string, len(*s))
	for i, v := range *s {
		f[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strings.Join(f, ",")
}

func (s *speeds) Set(v string) error {
	var out speeds
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		x, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", f)
		}
		if !(x > 0) || x > 1e9 {
			return fmt.Errorf("%g: each speed must be > 0 and finite", x)
		}
		for _, y := range out {
			if y == x {
				return fmt.Errorf("%g is listed twice", x)
			}
		}
		out = append(out, x)
	}
	if len(out) == 0 {
		return errors.New("no speed given")
	}
	*s = out
	return nil
}

// runSweep replays the trace once per --speed, every policy at each (the
// same fleets and order as one run), printing each speed's table as it
// ends, then the sweep's summary; --json and --plot get the sweep.
func (c *benchConfig) runSweep(ctx context.Context, stdout, stderr io.Writer) error {
	switch {
	case c.workload.Name != bench.Trace:
		return fmt.Errorf("--speed %s: several speeds need --workload trace", &c.speeds)
	case c.peers != "":
		return fmt.Errorf("--speed %s: several speeds do not combine with --peers; run one speed at a time", &c.speeds)
	case c.requestsOut != "":
		return fmt.Errorf("--requests-out %s: several speeds do not combine with it; run one speed at a time to log its requests", c.requestsOut)
	case c.sloTTFT <= 0:
		return fmt.Errorf("--slo-ttft %v: must be > 0", c.sloTTFT)
	}
	sw := &bench.Sweep{Workload: c.workload.Name, SLOTTFT: c.sloTTFT}
	for _, sp := range c.speeds {
		c.workload.Speed = sp
		wl, err := bench.Generate(c.workload)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "kvgate bench: speed %g\n", sp)
		rep, err := c.runWorkload(ctx, wl, stderr)
		if err != nil {
			return fmt.Errorf("speed %g: %w", sp, err)
		}
		fmt.Fprintf(stdout, "speed %g\n", sp)
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
		sw.Points = append(sw.Points, bench.SweepPoint{Speed: sp, Report: rep})
	}
	fmt.Fprintln(stdout)
	if err := sw.WriteTable(stdout); err != nil {
		return err
	}
	if c.jsonPath != "" {
		if err := writeFile(c.jsonPath, sw.WriteJSON); err != nil {
			return err
		}
	}
	if c.plotPath != "" {
		note := c.note()
		if err := writeFile(c.plotPath, func(w io.Writer) error { return sw.WritePlot(w, note) }); err != nil {
			return err
		}
	}
	return nil
}
