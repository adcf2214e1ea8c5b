package main

import (
	"strings"
)

// joinMultiValues rewrites "--name a b c" into "--name=a,b,c" for each flag in
// multi, so that flags documented (as in SMG) to take space-separated values
// work with Go's flag package. Values stop at the next argument that starts
// with "-". "--name=a,b" and repeated "--name a --name b" pass through.
func joinMultiValues(args []string, multi ...string) []string {
	isMulti := func(a string) (string, bool) {
		name := strings.TrimLeft(a, "-")
		if !strings.HasPrefix(a, "-") || strings.Contains(name, "=") {
			return "", false
		}
		for _, m := range multi {
			if name == m {
				return a, true
			}
		}
		return "", false
	}
	var out []string
	for i := 0; i < len(args); i++ {
		flagArg, ok := isMulti(args[i])
		if !ok {
			out = append(out, args[i])
			continue
		}
		var vals []string
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			vals = append(vals, args[i+1])
			i++
		}
		if len(vals) == 0 {
			out = append(out, flagArg) // let the flag package report the missing value
			continue
		}
		out = append(out, flagArg+"="+strings.Join(vals, ","))
	}
	return out
}

// listFlag is a flag.Value collecting comma-separated values across repeats.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}
