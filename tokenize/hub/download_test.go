package hub_test

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/tokenize/hub"
	"github.com/kvgate/kvgate/tokenize/textmodel"
)

const hubCommit = "0123456789abcdef0123456789abcdef01234567"

// fakeHub stands in for huggingface.co over TLS: a repository listing at
// /api/models/{repo}/revision/{rev}, files at /{repo}/resolve/{commit}/{file}
// with the hub's headers (ETag the git blob id, X-Repo-Commit), and files
// kept in LFS answered with a redirect to /cdn/ carrying X-Linked-Etag.
type fakeHub struct {
	srv   *httptest.Server
	repo  string
	files map[string][]byte
	lfs   map[string]bool
	// token, when set, is required; gated answers 403 to a valid token.
	token string
	gated bool
	// corrupt serves other bytes than the ETag announces for that file;
	// otherCommit answers files with another X-Repo-Commit than listed.
	corrupt     string
	otherCommit bool

	mu       sync.Mutex
	requests []string
}

func newFakeHub(t *testing.T, files map[string][]byte) *fakeHub {
	t.Helper()
	h := &fakeHub{repo: "org/model", files: files, lfs: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/models/{org}/{name}/revision/{rev}", h.listing)
	mux.HandleFunc("GET /{org}/{name}/resolve/{commit}/{file}", h.resolve)
	mux.HandleFunc("GET /cdn/{sha}", h.cdn)
	h.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.requests = append(h.requests, r.URL.Path)
		h.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// config reaches the fake hub as HF_ENDPOINT would, with cache as the cache.
func (h *fakeHub) config(cache, token string) hub.Config {
	return hub.Config{CacheDir: cache, Endpoint: h.srv.URL, Token: token, Client: h.srv.Client()}
}

func (h *fakeHub) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.requests)
}

// allowed answers as the hub does to a request it refuses; false when it did.
func (h *fakeHub) allowed(w http.ResponseWriter, r *http.Request) bool {
	if r.PathValue("org")+"/"+r.PathValue("name") != h.repo {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		http.Error(w, "Repository not found", http.StatusNotFound)
		return false
	}
	if h.token == "" {
		return true
	}
	if r.Header.Get("Authorization") != "Bearer "+h.token {
		http.Error(w, "Access to model is restricted", http.StatusUnauthorized)
		return false
	}
	if h.gated {
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, "Access to model is restricted", http.StatusForbidden)
		return false
	}
	return true
}

func (h *fakeHub) listing(w http.ResponseWriter, r *http.Request) {
	if !h.allowed(w, r) {
		return
	}
	if rev := r.PathValue("rev"); rev != "main" && rev != hubCommit {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		http.Error(w, "Invalid rev id", http.StatusNotFound)
		return
	}
	type sibling struct {
		RFilename string `json:"rfilename"`
	}
	info := struct {
		SHA      string    `json:"sha"`
		Siblings []sibling `json:"siblings"`
	}{SHA: hubCommit}
	for name := range h.files {
		info.Siblings = append(info.Siblings, sibling{name})
	}
	_ = json.NewEncoder(w).Encode(info)
}

func (h *fakeHub) resolve(w http.ResponseWriter, r *http.Request) {
	if !h.allowed(w, r) {
		return
	}
	name := r.PathValue("file")
	body, ok := h.files[name]
	if !ok || r.PathValue("commit") != hubCommit {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "Entry not found", http.StatusNotFound)
		return
	}
	w.Header().Set("X-Repo-Commit", hubCommit)
	if h.otherCommit {
		w.Header().Set("X-Repo-Commit", commitB)
	}
	if h.lfs[name] {
		sum := sha256.Sum256(body)
		w.Header().Set("X-Linked-Etag", `"`+hex.EncodeToString(sum[:])+`"`)
		http.Redirect(w, r, "/cdn/"+hex.EncodeToString(sum[:]), http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+gitBlobID(body)+`"`)
	if name == h.corrupt {
		body = append(slices.Clone(body), '!')
	}
	_, _ = w.Write(body)
}

func (h *fakeHub) cdn(w http.ResponseWriter, r *http.Request) {
	for _, body := range h.files {
		if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) == r.PathValue("sha") {
			w.Header().Set("ETag", `"cdn-etag-not-the-hubs"`)
			_, _ = w.Write(body)
			return
		}
	}
	http.NotFound(w, r)
}

func gitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// simModel is the simulated engine's tokenizer as a hub repository, with a
// weights file and a template in a subdirectory, which are not fetched.
func simModel(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{
		"config.json":                       []byte(`{"vocab_size": 2059}`),
		"model.safetensors":                 []byte("weights"),
		"additional_chat_templates/x.jinja": []byte("{{ 'x' }}"),
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join("../../workers/sim/tokenizer", name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	return files
}

// A hub id absent from the cache is fetched from HF_ENDPOINT with the
// token, into huggingface_hub's layout; the next resolution reads the cache
// and sends nothing, even with the hub gone.
func TestResolveDownloadsIntoTheCacheLayout(t *testing.T) {
	h := newFakeHub(t, simModel(t))
	h.token = "hf_secret"
	h.lfs["tokenizer.json"] = true
	cache := t.TempDir()
	got, err := h.config(cache, "hf_secret").Resolve(context.Background(), "org/model")
	if err != nil {
		t.Fatal(err)
	}
	repoDir := filepath.Join(cache, "models--org--model")
	snap := filepath.Join(repoDir, "snapshots", hubCommit)
	want := hub.Resolved{Path: snap, Repo: "org/model", Revision: "main", Commit: hubCommit, From: "hub"}
	if got != want {
		t.Fatalf("resolved %+v, want %+v", got, want)
	}
	if ref, err := os.ReadFile(filepath.Join(repoDir, "refs", "main")); err != nil || string(ref) != hubCommit {
		t.Errorf("refs/main = %q, %v; want the commit", ref, err)
	}
	tokSum := sha256.Sum256(h.files["tokenizer.json"])
	for name, blob := range map[string]string{
		"tokenizer.json":        hex.EncodeToString(tokSum[:]),               // LFS: the X-Linked-Etag
		"tokenizer_config.json": gitBlobID(h.files["tokenizer_config.json"]), // the ETag
	} {
		link, err := os.Readlink(filepath.Join(snap, name))
		if err != nil || link != "../../blobs/"+blob {
			t.Errorf("%s links to %q (%v), want ../../blobs/%s", name, link, err, blob)
		}
	}
	entries, _ := os.ReadDir(snap)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"tokenizer.json", "tokenizer_config.json"}) {
		t.Errorf("the snapshot holds %v; want the tokenizer files only", names)
	}
	blobs, _ := os.ReadDir(filepath.Join(repoDir, "blobs"))
	if len(blobs) != 2 {
		t.Errorf("blobs/ holds %d entries, want 2 (no temporary file left)", len(blobs))
	}
	m, err := textmodel.Load(textmodel.Sources{ModelPath: got.Path}, textmodel.Options{})
	if err != nil {
		t.Fatalf("the downloaded snapshot does not load: %v", err)
	}
	if !m.HasChatTemplate() {
		t.Error("the downloaded model has no chat template")
	}

	sent := len(h.seen())
	h.srv.Close()
	again, err := h.config(cache, "").Resolve(context.Background(), "org/model")
	if err != nil {
		t.Fatal(err)
	}
	if again.From != "cache" || again.Path != snap || len(h.seen()) != sent {
		t.Fatalf("second resolution %+v after %d requests (was %d); want the cache and no request", again, len(h.seen()), sent)
	}
}

// Without tokenizer.json, the tiktoken files are fetched instead.
func TestResolveDownloadsTiktokenFilesWithoutTokenizerJSON(t *testing.T) {
	h := newFakeHub(t, map[string][]byte{
		"tiktoken.model":        []byte("aGk= 0\n"),
		"tokenizer_config.json": []byte(`{}`),
		"chat_template.jinja":   []byte("{{ messages }}"),
		"tokenization_x.py":     []byte("code"),
	})
	cache := t.TempDir()
	got, err := h.config(cache, "").Resolve(context.Background(), "org/model@"+hubCommit)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tiktoken.model", "tokenizer_config.json", "chat_template.jinja"} {
		if _, err := os.Stat(filepath.Join(got.Path, name)); err != nil {
			t.Errorf("%s not fetched: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(got.Path, "tokenization_x.py")); err == nil {
		t.Error("code was fetched")
	}
	if _, err := os.Stat(filepath.Join(cache, "models--org--model", "refs")); err == nil {
		t.Error("a commit revision wrote a ref")
	}
}

func TestResolveSaysWhatToDoWhenTheHubRefuses(t *testing.T) {
	tests := []struct {
		name    string
		hub     func(h *fakeHub)
		arg     string
		token   string
		want    []string
		wantErr error
	}{
		{"gated, no token", func(h *fakeHub) { h.token = "hf_good" }, "org/model", "",
			[]string{"401", "set HF_TOKEN", "/org/model"}, hub.ErrAccess},
		{"wrong token", func(h *fakeHub) { h.token = "hf_good" }, "org/model", "hf_bad",
			[]string{"401", "HF_TOKEN is not valid"}, hub.ErrAccess},
		{"token without access", func(h *fakeHub) { h.token, h.gated = "hf_good", true }, "org/model", "hf_good",
			[]string{"403", "request it at"}, hub.ErrAccess},
		{"no such repository", nil, "org/other", "",
			[]string{"404", "no repository org/other"}, hub.ErrNotFound},
		{"no such revision", nil, "org/model@v9", "",
			[]string{"404", "has no revision v9"}, hub.ErrNotFound},
		{"no tokenizer in the repository", func(h *fakeHub) { delete(h.files, "tokenizer.json") }, "org/model", "",
			[]string{"holds no tokenizer.json", "--tokenizer-path"}, hub.ErrNotFound},
		{"corrupt download", func(h *fakeHub) { h.corrupt = "tokenizer_config.json" }, "org/model", "",
			[]string{"corrupt"}, nil},
		{"files of another commit than listed", func(h *fakeHub) { h.otherCommit = true }, "org/model", "",
			[]string{"served commit " + commitB + ", not " + hubCommit}, nil},
		{"hub unreachable", func(h *fakeHub) { h.srv.Close() }, "org/model", "",
			[]string{"hf download org/model", "HF_HUB_OFFLINE"}, hub.ErrUnreachable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHub(t, simModel(t))
			if tc.hub != nil {
				tc.hub(h)
			}
			cache := t.TempDir()
			_, err := h.config(cache, tc.token).Resolve(context.Background(), tc.arg)
			if err == nil {
				t.Fatal("resolved")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v is not %v", err, tc.wantErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if _, err := os.Stat(filepath.Join(cache, "models--org--model", "refs")); err == nil {
				t.Error("a failed download wrote a ref")
			}
		})
	}
}

// A file over the limit is refused, and nothing of it stays in the cache.
func TestResolveBoundsEachFile(t *testing.T) {
	h := newFakeHub(t, simModel(t))
	cache := t.TempDir()
	c := h.config(cache, "")
	c.MaxFileBytes = 1000 // the tokenizer.json is larger
	_, err := c.Resolve(context.Background(), "org/model")
	if err == nil || !strings.Contains(err.Error(), "over the limit of 1000") {
		t.Fatalf("error %v; want the limit", err)
	}
	blobs, _ := os.ReadDir(filepath.Join(cache, "models--org--model", "blobs"))
	for _, b := range blobs {
		if st, _ := b.Info(); st.Size() > 1000 {
			t.Errorf("blob %s of %d bytes left in the cache", b.Name(), st.Size())
		}
	}
}

// Offline, a hub id not in the cache is refused without a request.
func TestResolveOfflineSendsNothing(t *testing.T) {
	h := newFakeHub(t, simModel(t))
	c := h.config(t.TempDir(), "")
	c.Offline = true
	_, err := c.Resolve(context.Background(), "org/model")
	if !errors.Is(err, hub.ErrNotCached) || len(h.seen()) != 0 {
		t.Fatalf("error %v after %d requests; want ErrNotCached and none", err, len(h.seen()))
	}
}

// A cached snapshot that lacks the tokenizer (Python fetched config.json
// only) is completed in place: its other files stay, the tokenizer joins.
func TestResolveCompletesACachedSnapshot(t *testing.T) {
	h := newFakeHub(t, simModel(t))
	cache := t.TempDir()
	repoDir := cacheRepo{snapshots: []snapshot{{hubCommit, []string{"config.json"}}}, refs: map[string]string{"main": hubCommit}}.write(t, cache, "org/model")
	got, err := h.config(cache, "").Resolve(context.Background(), "org/model")
	if err != nil {
		t.Fatal(err)
	}
	if got.From != "hub" || got.Path != filepath.Join(repoDir, "snapshots", hubCommit) {
		t.Fatalf("resolved %+v; want the cached snapshot, completed from the hub", got)
	}
	for _, name := range []string{"config.json", "tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(got.Path, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
