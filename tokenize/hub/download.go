package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// maxInfoBytes bounds the repository listing: a repository of thousands of
// files lists them in well under a megabyte.
const maxInfoBytes = 16 << 20

// wantedFile reports whether the router reads a file of a model repository
// (top-level files only: textmodel reads no subdirectory). Tiktoken files
// are wanted only when there is no tokenizer.json, see wanted.
func wantedFile(name string) bool {
	switch name {
	case "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.json":
		return true
	}
	return strings.HasSuffix(name, ".jinja") && !strings.Contains(name, "/")
}

// wanted picks the files to fetch from a repository's listing, and says
// whether they include a tokenizer.
func wanted(files []string) (out []string, hasTok bool) {
	tokJSON := false
	for _, f := range files {
		tokJSON = tokJSON || f == "tokenizer.json"
	}
	for _, f := range files {
		switch {
		case wantedFile(f):
			out = append(out, f)
		case !tokJSON && !strings.Contains(f, "/") && isTiktoken(f):
			out = append(out, f)
			hasTok = true
		}
	}
	return out, hasTok || tokJSON
}

// download fetches a hub id's tokenizer files into the cache, as
// huggingface_hub's snapshot_download would with a filter: the repository's
// listing names the commit and the files, each file goes to blobs/ under
// its ETag and is linked from snapshots/<commit>/, and refs/<revision>
// records the commit last.
func (c Config) download(ctx context.Context, id ID, repoDir string) (Resolved, error) {
	cl := c.client()
	commit, files, err := c.listing(ctx, cl, id)
	if err != nil {
		return Resolved{}, err
	}
	names, hasTok := wanted(files)
	if !hasTok {
		return Resolved{}, fmt.Errorf("%s (revision %s) holds no tokenizer.json nor tiktoken files: %w; give a --tokenizer-path that has them",
			id.Repo, id.Revision, ErrNotFound)
	}
	snap := filepath.Join(repoDir, "snapshots", commit)
	if err := os.MkdirAll(snap, 0o755); err != nil {
		return Resolved{}, fmt.Errorf("hub cache: %w", err)
	}
	for _, name := range names {
		if st, err := os.Stat(filepath.Join(snap, name)); err == nil && st.Mode().IsRegular() {
			continue // already in the snapshot
		}
		if err := c.fetch(ctx, cl, id, commit, name, repoDir); err != nil {
			return Resolved{}, err
		}
	}
	if !isCommit(id.Revision) {
		if err := writeAtomic(filepath.Join(repoDir, "refs", filepath.FromSlash(id.Revision)), []byte(commit)); err != nil {
			return Resolved{}, fmt.Errorf("hub cache: %w", err)
		}
	}
	return Resolved{Path: snap, Repo: id.Repo, Revision: id.Revision, Commit: commit, From: "hub"}, nil
}

// listing asks the hub for a revision's commit and file names.
func (c Config) listing(ctx context.Context, cl *http.Client, id ID) (commit string, files []string, err error) {
	u := c.Endpoint + "/api/models/" + id.Repo + "/revision/" + url.PathEscape(id.Revision)
	resp, err := c.get(ctx, cl, u, id)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	var info struct {
		SHA      string `json:"sha"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
		} `json:"siblings"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxInfoBytes)).Decode(&info); err != nil {
		return "", nil, fmt.Errorf("%s: the hub's listing of %s is not readable: %w", u, id.Repo, err)
	}
	if !isCommit(info.SHA) {
		return "", nil, fmt.Errorf("%s: the hub's listing of %s names no commit (sha %q)", u, id.Repo, info.SHA)
	}
	for _, s := range info.Siblings {
		files = append(files, s.RFilename)
	}
	return info.SHA, files, nil
}

// fetch downloads one file into blobs/ and links it from the snapshot.
// The blob's name is the file's ETag (its git blob id, or for a file kept
// in LFS the X-Linked-Etag of the hub's redirect, its SHA-256), which the
// content is checked against; without one it is the content's SHA-256.
func (c Config) fetch(ctx context.Context, cl *http.Client, id ID, commit, name, repoDir string) error {
	u := c.Endpoint + "/" + id.Repo + "/resolve/" + commit + "/" + url.PathEscape(name)
	// The hub answers an LFS file with a redirect to a CDN whose headers
	// are the CDN's: the file's ETag and commit are read from the hub's own
	// answer, before the redirect.
	var linkedETag, repoCommit string
	redirected := false
	own := *cl
	own.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("more than 10 redirects")
		}
		redirected = true
		h := req.Response.Header
		if linkedETag == "" {
			linkedETag = normETag(h.Get("X-Linked-Etag"))
		}
		if repoCommit == "" {
			repoCommit = h.Get("X-Repo-Commit")
		}
		return nil
	}
	resp, err := c.get(ctx, &own, u, id)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	etag := linkedETag
	if !redirected {
		etag, repoCommit = normETag(resp.Header.Get("ETag")), resp.Header.Get("X-Repo-Commit")
	}
	if repoCommit != "" && repoCommit != commit {
		return fmt.Errorf("%s: the hub served commit %s, not %s", u, repoCommit, commit)
	}
	limit := c.MaxFileBytes
	if limit <= 0 {
		limit = DefaultMaxFileBytes
	}
	if resp.ContentLength > limit {
		return fmt.Errorf("%s: %d bytes, over the limit of %d for one file", u, resp.ContentLength, limit)
	}
	blob, n, err := writeBlob(filepath.Join(repoDir, "blobs"), etag, resp.Body, limit)
	if err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	if err := linkAtomic("../../blobs/"+blob, filepath.Join(repoDir, "snapshots", commit, name)); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	if c.Logger != nil {
		c.Logger.InfoContext(ctx, "downloaded from the hub", "repo", id.Repo, "file", name, "commit", commit, "bytes", n)
	}
	return nil
}

var (
	sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)
	sha1Hex   = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// normETag strips an ETag's quotes and weak mark; "" unless what is left is
// a hex digest, the only kind that may name a file in the cache.
func normETag(s string) string {
	s = strings.Trim(strings.TrimPrefix(strings.TrimSpace(s), "W/"), `"`)
	if sha256Hex.MatchString(s) || sha1Hex.MatchString(s) {
		return s
	}
	return ""
}

// writeBlob writes body to blobs/<etag> through a temporary file, checking
// it against etag (a SHA-256, or a git blob id) and its size against limit.
// It returns the blob's name and size.
func writeBlob(dir, etag string, body io.Reader, limit int64) (string, int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	f, err := os.CreateTemp(dir, ".download.*.incomplete")
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(f.Name()) // after the rename, there is nothing left to remove
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, sum), io.LimitReader(body, limit+1))
	if err == nil && n > limit {
		err = fmt.Errorf("over the limit of %d bytes for one file", limit)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", n, err
	}
	name := hex.EncodeToString(sum.Sum(nil))
	switch {
	case sha256Hex.MatchString(etag) && etag != name:
		return "", n, fmt.Errorf("the content's SHA-256 is %s, not the %s the hub announced: the download is corrupt", name, etag)
	case sha1Hex.MatchString(etag):
		got, err := gitBlobID(f.Name(), n)
		if err != nil {
			return "", n, err
		}
		if got != etag {
			return "", n, fmt.Errorf("the content's git blob id is %s, not the %s the hub announced: the download is corrupt", got, etag)
		}
		name = etag
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		return "", n, err
	}
	return name, n, nil
}

// gitBlobID is the git object id of a file of n bytes: the SHA-1 of
// "blob <n>\x00" and the content, the ETag the hub gives a file not in LFS.
func gitBlobID(path string, n int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", n)
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// client is c.Client, or one whose every step is bounded: a hub that does
// not answer fails within seconds, not at the TCP timeout.
func (c Config) client() *http.Client {
	if c.Client != nil {
		return c.Client
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = 30 * time.Second
	return &http.Client{Transport: t}
}

// get sends a GET with the token and turns every failure into an error
// that says what to do.
func (c Config) get(ctx context.Context, cl *http.Client, u string, id ID) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "kvgate")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := cl.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: the download did not finish in time: %w", u, ctx.Err())
		}
		return nil, fmt.Errorf("%w: %s: %w; with no network, download the tokenizer files where there is one (hf download %s) "+
			"into the Hugging Face cache or a directory, and set HF_HUB_OFFLINE=1 or give that directory", ErrUnreachable, c.Endpoint, err, id.Repo)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	resp.Body.Close()
	return nil, c.statusError(resp, u, id)
}

// statusError says what a refusal from the hub means and what to do. The
// hub answers 401 for a private or missing repository asked without a
// token, and for a gated one; 403 when the token's account has no access.
func (c Config) statusError(resp *http.Response, u string, id ID) error {
	page := c.Endpoint + "/" + id.Repo
	code := resp.Header.Get("X-Error-Code")
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		if c.Token == "" {
			return fmt.Errorf("%s: %w (401): %s is gated or private, or does not exist; set HF_TOKEN to a token of an account with access "+
				"(for a gated model, accept its terms at %s first)", u, ErrAccess, id.Repo, page)
		}
		return fmt.Errorf("%s: %w (401): HF_TOKEN is not valid for %s, or it does not exist; check the token and the id", u, ErrAccess, id.Repo)
	case http.StatusForbidden:
		return fmt.Errorf("%s: %w (403): the account of HF_TOKEN has no access to %s; request it at %s", u, ErrAccess, id.Repo, page)
	case http.StatusNotFound:
		what := fmt.Sprintf("no repository %s", id.Repo)
		switch code {
		case "RevisionNotFound":
			what = fmt.Sprintf("%s has no revision %s", id.Repo, id.Revision)
		case "EntryNotFound":
			what = fmt.Sprintf("%s has no such file at revision %s", id.Repo, id.Revision)
		}
		return fmt.Errorf("%s: %w (404): %s on %s; check the id and the revision", u, ErrNotFound, what, c.Endpoint)
	}
	return fmt.Errorf("%s: the hub answered %s", u, resp.Status)
}
