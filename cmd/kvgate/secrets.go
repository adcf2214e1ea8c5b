package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// secretFlag reports whether the flag named name takes a key. Such values
// never appear in anything kvgate shows: pprof's /debug/pprof/cmdline is
// redacted, help output shows no default taken from the environment, and
// the start-up log says only whether a key is set.
func secretFlag(name string) bool {
	switch name {
	case "api-key", "admin-api-key":
		return true
	}
	return false
}

// redacted replaces a secret flag's value wherever kvgate shows a command line.
const redacted = "REDACTED"

// isSecretFlag reports whether arg names a secret flag ("-api-key",
// "--api-key"; the flag package takes one dash or two) and whether its value
// is attached ("--api-key=KEY") rather than the next argument.
func isSecretFlag(arg string) (secret, attached bool) {
	name, ok := strings.CutPrefix(arg, "-")
	if !ok {
		return false, false
	}
	name = strings.TrimPrefix(name, "-")
	name, _, attached = strings.Cut(name, "=")
	if !secretFlag(name) {
		return false, false
	}
	return true, attached
}

// redactArgs returns a copy of a command line with the values of the secret
// flags replaced, in both "--flag value" and "--flag=value" forms. A secret
// flag takes the next argument as its value whatever it looks like (as the
// flag package does for a flag that is not boolean), so that argument is
// replaced even when it starts with a dash.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i := 0; i < len(out); i++ {
		secret, attached := isSecretFlag(out[i])
		switch {
		case !secret:
		case attached:
			name, _, _ := strings.Cut(out[i], "=")
			out[i] = name + "=" + redacted
		case i+1 < len(out):
			i++
			out[i] = redacted
		}
	}
	return out
}

// cmdlineHandler answers /debug/pprof/cmdline as net/http/pprof's Cmdline
// does (the arguments separated by NUL bytes), with the secret flags'
// values redacted: pprof's own handler prints os.Args as they are, keys
// included.
func cmdlineHandler(args []string) http.HandlerFunc {
	body := strings.Join(redactArgs(args), "\x00")
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, body)
	}
}

// secret is a key as the command line gives it: the flag's value, a file
// holding it, or an environment variable. The flag's default is empty (so
// -h never prints a key taken from the environment); resolve applies the
// file and the environment after parsing.
type secret struct {
	value, file string
}

// resolve returns the key: the flag's value or the file's content (not
// both), else the environment variable env. A file's content is trimmed of
// surrounding white space (editors and `echo` add a newline) and must not be
// empty. Errors name the flag and the file, never the key.
func (s secret) resolve(flagName, env string, getenv func(string) string) (string, error) {
	switch {
	case s.value != "" && s.file != "":
		return "", fmt.Errorf("--%s and --%s-file are both set; give the key one way", flagName, flagName)
	case s.file != "":
		b, err := os.ReadFile(s.file)
		if err != nil {
			return "", fmt.Errorf("--%s-file: %w", flagName, err)
		}
		key := strings.TrimSpace(string(b))
		if key == "" {
			return "", fmt.Errorf("--%s-file %s is empty", flagName, s.file)
		}
		return key, nil
	case s.value != "":
		return s.value, nil
	}
	return getenv(env), nil
}

// resolveKeys fills apiKey and adminAPIKey from their flags, files and
// environment variables.
func (c *serveConfig) resolveKeys(getenv func(string) string) error {
	var err1, err2 error
	c.apiKey, err1 = c.apiKeySrc.resolve("api-key", "KVGATE_API_KEY", getenv)
	c.adminAPIKey, err2 = c.adminAPIKeySrc.resolve("admin-api-key", "KVGATE_ADMIN_API_KEY", getenv)
	return errors.Join(err1, err2)
}
