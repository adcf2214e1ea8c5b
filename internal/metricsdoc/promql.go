package metricsdoc

import (
	"fmt"
	"slices"
	"strings"
)

// promqlWords are PromQL's aggregation operators, functions and keywords:
// identifiers that are never metric names. A name followed by "(" is a call
// whatever it is, so the list matters for aggregations written with their
// grouping first ("sum by (worker) (x)") and for keywords.
const promqlWords = `
		sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio
		by without on ignoring group_left group_right bool and or unless offset atan2 inf nan start end
		abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month day_of_week
		day_of_year days_in_month delta deriv exp floor histogram_avg histogram_count histogram_fraction
		histogram_quantile histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta
		increase irate label_join label_replace ln log2 log10 minute month predict_linear rate resets
		round scalar sgn sort sort_desc sort_by_label sort_by_label_desc sqrt time timestamp vector year
		avg_over_time min_over_time max_over_time sum_over_time count_over_time quantile_over_time
		stddev_over_time stdvar_over_time last_over_time present_over_time mad_over_time
		acos acosh asin asinh atan atanh cos cosh sin sinh tan tanh deg rad pi`

func isPromQLWord(w string) bool {
	return slices.Contains(strings.Fields(promqlWords), strings.ToLower(w))
}

// MetricNames returns the metric names a PromQL expression selects, sorted
// and without repeats. It is a lexer, not a parser: it skips string
// literals, label matchers ({...}), ranges and subqueries ([...]), numbers
// and durations, Grafana variables ($name, ${name}, $__rate_interval),
// grouping label lists (by/without/on/ignoring/group_left/group_right
// (...)), calls and PromQL's own words. Prometheus itself checks that the
// expression parses (scripts/promql-check.sh); this finds what it reads.
func MetricNames(expr string) ([]string, error) {
	names := map[string]bool{}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d in %q", i, expr)
			}
			i = j + 1
		case c == '{' || c == '[':
			j, err := closing(expr, i)
			if err != nil {
				return nil, err
			}
			i = j + 1
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				j, err := closing(expr, i)
				if err != nil {
					return nil, err
				}
				i = j + 1
				continue
			}
			for i < len(expr) && isIdent(expr[i], false) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isIdent(expr[i], false) || expr[i] == '.') {
				i++ // 1.5, 1e3, 0x1f, 5m, 1h30m
			}
		case isIdent(c, true):
			j := i
			for j < len(expr) && isIdent(expr[j], false) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n' || expr[k] == '\r') {
				k++
			}
			switch {
			case word == "by" || word == "without" || word == "on" || word == "ignoring" ||
				word == "group_left" || word == "group_right":
				if k < len(expr) && expr[k] == '(' {
					end, err := closing(expr, k)
					if err != nil {
						return nil, err
					}
					j = end + 1
				}
			case isPromQLWord(word):
			case k < len(expr) && expr[k] == '(':
				// An unknown function: Prometheus will say so.
			default:
				names[word] = true
			}
			i = j
		default:
			i++
		}
	}
	return slices.Sorted(func(yield func(string) bool) {
		for n := range names {
			if !yield(n) {
				return
			}
		}
	}), nil
}

func isIdent(c byte, first bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == ':':
		return true
	case c >= '0' && c <= '9':
		return !first
	}
	return false
}

// closing returns the index of the bracket that closes the one at open,
// skipping string literals inside.
func closing(expr string, open int) (int, error) {
	pairs := map[byte]byte{'{': '}', '[': ']', '(': ')'}
	want, depth := pairs[expr[open]], 0
	for i := open; i < len(expr); i++ {
		switch c := expr[i]; {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			i = j
		case c == expr[open]:
			depth++
		case c == want:
			depth--
			if depth == 0 {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("unclosed %q at %d in %q", expr[open], open, expr)
}
