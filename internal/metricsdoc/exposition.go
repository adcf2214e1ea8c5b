package metricsdoc

import (
	"fmt"
	"strconv"
	"strings"
)

// Family is one metric family of a /metrics page in Prometheus' text format.
type Family struct {
	Name   string
	Type   string // as its "# TYPE" line says
	Series []Series
}

// Series is one sample line: its name (a histogram's _bucket, _sum or
// _count), labels and value.
type Series struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Moved reports whether the family has recorded anything: a counter above
// zero, a histogram with observations. Gauges move when they have a series.
func (f *Family) Moved() bool {
	for _, s := range f.Series {
		switch {
		case f.Type == "gauge",
			f.Type == "counter" && s.Value > 0,
			f.Type == "histogram" && strings.HasSuffix(s.Name, "_count") && s.Value > 0:
			return true
		}
	}
	return false
}

// ParseExposition reads a /metrics page in Prometheus' text format (version
// 0.0.4), the format client_golang serves by default. Every sample must
// follow its family's "# TYPE" line, as client_golang writes them.
func ParseExposition(text string) (map[string]*Family, error) {
	fams := map[string]*Family{}
	var cur *Family
	for n, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			if len(f) != 4 {
				return nil, fmt.Errorf("line %d: %q", n+1, line)
			}
			cur = &Family{Name: f[2], Type: f[3]}
			fams[cur.Name] = cur
		case line == "" || strings.HasPrefix(line, "#"):
		default:
			s, err := parseSample(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			if cur == nil || !strings.HasPrefix(s.Name, cur.Name) {
				return nil, fmt.Errorf("line %d: sample %s outside its family", n+1, s.Name)
			}
			cur.Series = append(cur.Series, s)
		}
	}
	return fams, nil
}

func parseSample(line string) (Series, error) {
	s := Series{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("no value in %q", line)
	}
	s.Name, line = line[:i], line[i:]
	if strings.HasPrefix(line, "{") {
		line = line[1:]
		for !strings.HasPrefix(line, "}") {
			eq := strings.Index(line, `="`)
			if eq < 0 {
				return s, fmt.Errorf("bad labels in %s", s.Name)
			}
			name := strings.TrimPrefix(line[:eq], ",")
			line = line[eq+2:]
			var val strings.Builder
			j := 0
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
					if line[j] == 'n' {
						val.WriteByte('\n')
						continue
					}
				}
				val.WriteByte(line[j])
			}
			if j == len(line) {
				return s, fmt.Errorf("unterminated label value in %s", s.Name)
			}
			s.Labels[name] = val.String()
			line = strings.TrimPrefix(line[j+1:], ",")
		}
		line = line[1:]
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value for %s", s.Name)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("value of %s: %w", s.Name, err)
	}
	s.Value = v
	return s, nil
}
