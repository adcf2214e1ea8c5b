package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// parseFlags parses args into fs the same way for every command. A mistake
// gets one message (flagError's) instead of the flag package's echo and the
// whole flag list; -h prints the list and returns flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string, command string, stderr io.Writer) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stderr, "Usage of kvgate %s:\n", command)
		fs.PrintDefaults()
		return err
	}
	return flagError(fs, err, command)
}

// flagError turns the flag package's parse error into one that says what to
// do: an unknown flag names the closest defined one, if one is close enough
// to be a typo, and points at -h instead of printing every flag.
func flagError(fs *flag.FlagSet, err error, command string) error {
	const undefined = "flag provided but not defined: -"
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, undefined)
	if !ok {
		return fmt.Errorf("%s: %w", command, err)
	}
	name = strings.TrimLeft(name, "-")
	hint := ""
	if near := closestFlag(fs, name); near != "" {
		hint = " (did you mean --" + near + "?)"
	}
	return errors.New("unknown flag --" + name + hint + "; kvgate " + command + " -h lists the flags")
}

// closestFlag returns the defined flag a mistyped name most likely meant, or
// "" when none is close: the fewest single-character edits, allowing about
// one edit in three characters (at least one, at most three), or a flag the
// name is a unique prefix of. Ties go to the first in lexical order, so the
// hint is stable.
func closestFlag(fs *flag.FlagSet, name string) string {
	if name == "" {
		return ""
	}
	limit := min(max(len(name)/3, 1), 3)
	best, bestDist := "", limit+1
	var prefixed []string
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, name) {
			prefixed = append(prefixed, f.Name)
		}
		if d := editDistance(strings.ToLower(name), f.Name); d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	if best != "" {
		return best
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance counts the insertions, deletions, substitutions and swaps of
// two neighbours that turn a into b (optimal string alignment distance, in
// bytes: flag names are ASCII). A swap counts as one edit because swapped
// letters are the commonest typo.
func editDistance(a, b string) int {
	rows := make([][]int, len(a)+1)
	for i := range rows {
		rows[i] = make([]int, len(b)+1)
		rows[i][0] = i
	}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d := min(rows[i-1][j]+1, rows[i][j-1]+1, rows[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d = min(d, rows[i-2][j-2]+1)
			}
			rows[i][j] = d
		}
	}
	return rows[len(a)][len(b)]
}
