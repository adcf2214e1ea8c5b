package main

import (
	"errors"
	"fmt"
	"strings"
)

// flagError turns the flag package's parse error into one that says what to
// do: an unknown flag points at -h instead of the whole flag list being
// printed.
func flagError(err error, command string) error {
	const undefined = "flag provided but not defined: -"
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, undefined)
	if !ok {
		return fmt.Errorf("%s: %w", command, err)
	}
	name = strings.TrimLeft(name, "-")
	return errors.New("unknown flag --" + name + "; kvgate " + command + " -h lists the flags")
}
