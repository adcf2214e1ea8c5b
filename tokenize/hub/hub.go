// Package hub turns what --model-path and --tokenizer-path say into a
// directory on disk: a local directory as it is, a Hugging Face cache
// directory (models--org--name, or one of its snapshots) at the snapshot it
// names, or a hub id (org/name[@revision]) found in the Hugging Face cache or
// else fetched from the hub into that cache.
//
// The cache is the one huggingface_hub keeps (blobs/, snapshots/<commit>/ of
// relative symlinks, refs/<revision>), found from the same environment
// variables, so that kvgate, transformers and the engines on one machine
// share one copy of a model and kvgate never downloads what Python already
// has. Only the files the router reads are fetched: tokenizer and chat
// template files, never weights.
package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// DefaultEndpoint is the hub kvgate asks when HF_ENDPOINT is not set.
const DefaultEndpoint = "https://huggingface.co"

// DefaultMaxFileBytes bounds each downloaded file. The largest tokenizer.json
// files (Gemma 3's, about 33 MB) are far below it; a response beyond it is
// not a tokenizer and is not written to the cache.
const DefaultMaxFileBytes = 256 << 20

// Errors Resolve wraps, so that callers and tests can tell the cases apart;
// the messages around them say what to do.
var (
	// ErrNotCached: HF_HUB_OFFLINE is set and the cache lacks the model.
	ErrNotCached = errors.New("not in the Hugging Face cache")
	// ErrAccess: the hub answered 401 or 403 (a gated or private model).
	ErrAccess = errors.New("the hub refused access")
	// ErrNotFound: no such repository, revision or file on the hub.
	ErrNotFound = errors.New("not found on the hub")
	// ErrUnreachable: the hub could not be reached at all.
	ErrUnreachable = errors.New("the hub is unreachable")
)

// Config says where the cache is and how to reach the hub. FromEnv fills it
// as huggingface_hub would; the zero value of each field but CacheDir and
// Endpoint is usable.
type Config struct {
	// CacheDir is the hub cache, the directory holding models--org--name.
	CacheDir string
	// Endpoint is the hub's base URL (HF_ENDPOINT).
	Endpoint string
	// Token is sent as "Authorization: Bearer" to the hub (HF_TOKEN).
	Token string
	// Offline never touches the network (HF_HUB_OFFLINE).
	Offline bool
	// Client makes the requests; nil: one with bounded connect, TLS and
	// response-header timeouts that honours HTTPS_PROXY.
	Client *http.Client
	// MaxFileBytes bounds each download; 0: DefaultMaxFileBytes.
	MaxFileBytes int64
	// Logger records each download; nil: nothing is logged.
	Logger *slog.Logger
}

// FromEnv reads the configuration from the environment variables
// huggingface_hub uses, through getenv (os.Getenv in the binary): the cache
// is HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
// else ~/.cache/huggingface/hub; the token is HF_TOKEN, else the file
// HF_TOKEN_PATH, else $HF_HOME/token (where `hf auth login` writes it).
func FromEnv(getenv func(string) string) Config {
	home := getenv("HF_HOME")
	if home == "" {
		xdg := getenv("XDG_CACHE_HOME")
		if xdg == "" {
			xdg = filepath.Join(getenv("HOME"), ".cache")
		}
		home = filepath.Join(xdg, "huggingface")
	}
	c := Config{
		CacheDir: getenv("HF_HUB_CACHE"),
		Endpoint: strings.TrimRight(getenv("HF_ENDPOINT"), "/"),
		Token:    strings.TrimSpace(getenv("HF_TOKEN")),
	}
	if c.CacheDir == "" {
		c.CacheDir = filepath.Join(home, "hub")
	}
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.Token == "" {
		path := getenv("HF_TOKEN_PATH")
		if path == "" {
			path = filepath.Join(home, "token")
		}
		if b, err := os.ReadFile(path); err == nil {
			c.Token = strings.TrimSpace(string(b))
		}
	}
	switch strings.ToLower(getenv("HF_HUB_OFFLINE")) {
	case "1", "on", "yes", "true":
		c.Offline = true
	}
	return c
}

// Resolved is where a model's files are, and how they were found.
type Resolved struct {
	// Path is the local directory (or file) to read.
	Path string
	// Repo is the hub id, when the path is in the cache; Revision is the
	// revision asked for and Commit the snapshot's commit.
	Repo, Revision, Commit string
	// From is "local" (a path given as is), "cache" or "hub" (downloaded
	// now).
	From string
}

// Resolve finds the directory arg names. A path that exists locally wins
// over a hub id of the same spelling; a cache repository directory is read
// at the snapshot its refs/main names (else its only or newest snapshot); a
// hub id is looked up in the cache and, when absent and not Offline,
// downloaded. ctx bounds the downloads.
func (c Config) Resolve(ctx context.Context, arg string) (Resolved, error) {
	if arg == "" {
		return Resolved{}, errors.New("no model path")
	}
	st, statErr := os.Stat(arg)
	if statErr == nil {
		if st.IsDir() {
			return resolveLocalDir(arg)
		}
		return Resolved{Path: arg, From: "local"}, nil
	}
	id, ok := ParseID(arg)
	if !ok {
		return Resolved{}, fmt.Errorf("%w, and %q is not a Hugging Face hub id (org/name or org/name@revision)", statErr, arg)
	}
	repoDir := filepath.Join(c.CacheDir, repoDirName(id.Repo))
	if snap, commit, ok := cachedSnapshot(repoDir, id.Revision); ok {
		return Resolved{Path: snap, Repo: id.Repo, Revision: id.Revision, Commit: commit, From: "cache"}, nil
	}
	if c.Offline {
		return Resolved{}, fmt.Errorf("%s (revision %s) with its tokenizer is %w at %s and HF_HUB_OFFLINE is set: "+
			"download it where there is network (hf download %s --revision %s) into that cache, or give a local directory",
			id.Repo, id.Revision, ErrNotCached, c.CacheDir, id.Repo, id.Revision)
	}
	return c.download(ctx, id, repoDir)
}

// ID is a hub id: a repository and a revision (a branch, tag or commit).
type ID struct{ Repo, Revision string }

var (
	namePart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)
	revision = regexp.MustCompile(`^[A-Za-z0-9._][A-Za-z0-9._/-]{0,254}$`)
	commitID = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// ParseID reads "org/name" or "org/name@revision" (revision main when none
// is given). Ids without an organisation are refused: a bare word is far
// more often a mistyped directory than a legacy model name.
func ParseID(s string) (ID, bool) {
	repo, rev, hasRev := strings.Cut(s, "@")
	if !hasRev {
		rev = "main"
	}
	org, name, ok := strings.Cut(repo, "/")
	if !ok || !namePart.MatchString(org) || !namePart.MatchString(name) ||
		strings.Contains(repo, "--") || strings.Contains(repo, "..") ||
		!revision.MatchString(rev) || strings.Contains(rev, "..") || strings.HasSuffix(rev, "/") {
		return ID{}, false
	}
	return ID{Repo: repo, Revision: rev}, true
}

// isCommit reports whether a revision is a full commit hash.
func isCommit(rev string) bool { return commitID.MatchString(rev) }
