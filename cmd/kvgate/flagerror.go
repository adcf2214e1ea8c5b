package main

import (
	"errors"
	"fmt"
	"strings"
)

// smgOnlyFlags are SMG's flags (the seeds') that kvgate does not implement
// yet, with what they are for, so that a seed's command line that uses one
// is told so by name.
var smgOnlyFlags = map[string]string{
	"service-discovery":      "Kubernetes service discovery",
	"service-discovery-port": "Kubernetes service discovery",
	"prefill-selector":       "Kubernetes service discovery",
	"decode-selector":        "Kubernetes service discovery",
}

// flagError turns the flag package's parse error into one that says what to
// do: an SMG flag kvgate lacks is named as such, any other unknown flag
// points at -h instead of the whole flag list being printed.
func flagError(err error, command string) error {
	const undefined = "flag provided but not defined: -"
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, undefined)
	if !ok {
		return fmt.Errorf("%s: %w", command, err)
	}
	name = strings.TrimLeft(name, "-")
	if what, smg := smgOnlyFlags[name]; smg {
		return fmt.Errorf("--%s is an SMG flag kvgate does not implement yet (%s)", name, what)
	}
	return errors.New("unknown flag --" + name + "; kvgate " + command + " -h lists the flags")
}
