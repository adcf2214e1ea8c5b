// Package metricsdoc reads docs/metrics.md, the metrics reference, so that
// tests can hold the reference, the router's /metrics output and the Grafana
// dashboard to one another. It knows the reference's table layout and
// enough PromQL to find the metric names an expression reads; it is used by
// tests only.
package metricsdoc

import (
	"fmt"
	"slices"
	"strings"
)

// Metric is one documented metric: a row of a table whose first cell is the
// metric's name in backticks.
type Metric struct {
	Name   string
	Type   string   // counter, gauge or histogram
	Labels []string // sorted; none for an unlabelled metric
	Unit   string
	Line   int // 1-based line of its row, for messages
}

// Doc is the parsed reference.
type Doc struct {
	Metrics map[string]Metric
	// Blocks are the fenced PromQL code blocks (info string "promql", with
	// optional words after it, such as "promql smg").
	Blocks []Block
}

// Block is one fenced PromQL block.
type Block struct {
	Info string // the fence's info string
	Text string
	Line int // 1-based line of the opening fence
}

// metricColumns is the reference's table header: every metric table has
// these columns, in this order.
var metricColumns = []string{"metric", "type", "labels", "unit", "meaning"}

// Parse reads the reference. A row that starts with a backticked kvgate_
// name must have the reference's five columns, a known type and labels
// written as backticked names (or "—" for none); a name documented twice is
// an error, because two rows could disagree.
func Parse(markdown string) (*Doc, error) {
	d := &Doc{Metrics: map[string]Metric{}}
	lines := strings.Split(markdown, "\n")
	var errs []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if info, ok := strings.CutPrefix(strings.TrimSpace(line), "```promql"); ok {
			start := i
			var body []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				body = append(body, lines[i])
			}
			d.Blocks = append(d.Blocks, Block{Info: "promql" + info, Text: strings.Join(body, "\n"), Line: start + 1})
			continue
		}
		if !strings.HasPrefix(line, "| `kvgate_") {
			continue
		}
		m, err := parseRow(line)
		if err != nil {
			errs = append(errs, fmt.Sprintf("line %d: %v", i+1, err))
			continue
		}
		m.Line = i + 1
		if prev, dup := d.Metrics[m.Name]; dup {
			errs = append(errs, fmt.Sprintf("line %d: %s is documented twice (first at line %d)", i+1, m.Name, prev.Line))
			continue
		}
		d.Metrics[m.Name] = m
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("metricsdoc: %s", strings.Join(errs, "; "))
	}
	return d, nil
}

func parseRow(line string) (Metric, error) {
	cells := Cells(line)
	if len(cells) != len(metricColumns) {
		return Metric{}, fmt.Errorf("%d cells, want %d (%s)", len(cells), len(metricColumns), strings.Join(metricColumns, ", "))
	}
	name, ok := backticked(cells[0])
	if !ok || len(name) != 1 {
		return Metric{}, fmt.Errorf("first cell %q: want one backticked metric name", cells[0])
	}
	m := Metric{Name: name[0], Type: cells[1], Unit: cells[3]}
	switch m.Type {
	case "counter", "gauge", "histogram":
	default:
		return Metric{}, fmt.Errorf("%s: type %q, want counter, gauge or histogram", m.Name, m.Type)
	}
	if c := cells[2]; c != "—" {
		labels, ok := backticked(c)
		if !ok || len(labels) == 0 {
			return Metric{}, fmt.Errorf("%s: labels %q: want backticked names separated by commas, or —", m.Name, c)
		}
		m.Labels = slices.Sorted(slices.Values(labels))
	}
	return m, nil
}

// backticked returns the backticked words of a cell written as "`a`, `b`";
// ok is false if anything else is in it.
func backticked(cell string) ([]string, bool) {
	var out []string
	for _, part := range strings.Split(cell, ",") {
		part = strings.TrimSpace(part)
		if len(part) < 3 || part[0] != '`' || part[len(part)-1] != '`' || strings.Count(part, "`") != 2 {
			return nil, false
		}
		out = append(out, part[1:len(part)-1])
	}
	return out, true
}

// Cells splits a Markdown table row into its trimmed cells, as GitHub's
// Markdown does: on every pipe not escaped with a backslash, code spans
// included, and without the empty cells outside the outer pipes.
func Cells(row string) []string {
	row = strings.TrimSpace(row)
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteString(`\|`)
			i++
		case row[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	cells = append(cells, strings.TrimSpace(cur.String()))
	if strings.HasPrefix(row, "|") {
		cells = cells[1:]
	}
	if strings.HasSuffix(row, "|") && !strings.HasSuffix(row, `\|`) {
		cells = cells[:len(cells)-1]
	}
	return cells
}

// TableProblems lists the tables of a Markdown document that would not
// render as tables, or would render some rows wrongly: a header not followed
// by a delimiter row, or a row whose cell count differs from its header's
// (GitHub drops the extra cells, or the row falls out of the table as plain
// text). Fenced code is skipped.
func TableProblems(markdown string) []string {
	var problems []string
	lines := strings.Split(markdown, "\n")
	inFence := false
	header := 0 // cells of the current table's header; 0 outside a table
	for i, line := range lines {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") {
			inFence = !inFence
			header = 0
			continue
		}
		if inFence || !strings.HasPrefix(t, "|") {
			header = 0
			continue
		}
		n := len(Cells(t))
		if header == 0 {
			if i+1 >= len(lines) || !isDelimiterRow(lines[i+1]) {
				problems = append(problems, fmt.Sprintf("line %d: a table row without a header and delimiter row", i+1))
				header = -1
				continue
			}
			if d := len(Cells(lines[i+1])); d != n {
				problems = append(problems, fmt.Sprintf("line %d: header has %d cells, delimiter row %d", i+1, n, d))
			}
			header = n
			continue
		}
		if header > 0 && n != header {
			problems = append(problems, fmt.Sprintf("line %d: %d cells, the table's header has %d (escape pipes in cells as \\|)", i+1, n, header))
		}
	}
	return problems
}

func isDelimiterRow(line string) bool {
	cells := Cells(line)
	if len(cells) == 0 {
		return false
	}
	for _, c := range cells {
		c = strings.Trim(c, ":")
		if c == "" || strings.Trim(c, "-") != "" {
			return false
		}
	}
	return true
}

// BaseName maps a series name to the documented metric it belongs to:
// itself, or for a histogram's _bucket, _sum and _count series, the
// histogram. ok is false if neither is documented.
func (d *Doc) BaseName(name string) (string, bool) {
	if _, ok := d.Metrics[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if m, ok := d.Metrics[base]; ok && m.Type == "histogram" {
				return base, true
			}
		}
	}
	return "", false
}
