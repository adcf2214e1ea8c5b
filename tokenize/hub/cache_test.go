package hub_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/tokenize/hub"
)

const (
	commitA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	commitB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// cacheRepo writes a cache repository directory as huggingface_hub lays it
// out: each snapshot's files are symlinks into blobs/, refs name commits.
// Snapshots are written in order, one second apart in modification time.
type cacheRepo struct {
	snapshots []snapshot
	refs      map[string]string
}

type snapshot struct {
	commit string
	files  []string // each holds its own name
}

func (r cacheRepo) write(t *testing.T, cache, repo string) string {
	t.Helper()
	dir := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	mkdir(t, filepath.Join(dir, "snapshots"))
	base := time.Now().Add(-time.Hour)
	for i, s := range r.snapshots {
		snap := filepath.Join(dir, "snapshots", s.commit)
		mkdir(t, snap)
		for _, f := range s.files {
			blob := s.commit[:8] + "-" + f
			writeFile(t, filepath.Join(dir, "blobs", blob), f)
			if err := os.Symlink("../../blobs/"+blob, filepath.Join(snap, f)); err != nil {
				t.Fatal(err)
			}
		}
		at := base.Add(time.Duration(i) * time.Second)
		if err := os.Chtimes(snap, at, at); err != nil {
			t.Fatal(err)
		}
	}
	for ref, c := range r.refs {
		writeFile(t, filepath.Join(dir, "refs", ref), c)
	}
	return dir
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	mkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// offlineConfig reads cache and can reach no hub: its endpoint refuses
// connections, so a test passes only if the cache answered.
func offlineConfig(cache string) hub.Config {
	return hub.Config{CacheDir: cache, Endpoint: "https://127.0.0.1:1"}
}

func TestResolveReadsTheCacheLayouts(t *testing.T) {
	tok := []string{"tokenizer.json", "tokenizer_config.json"}
	tests := []struct {
		name string
		repo cacheRepo
		// arg is what --model-path says; REPO stands for the repository
		// directory, CACHE for the cache.
		arg                  string
		wantCommit, wantFrom string
		wantRevision         string
	}{
		{"repo dir at refs/main, not the newest snapshot",
			cacheRepo{snapshots: []snapshot{{commitA, tok}, {commitB, tok}}, refs: map[string]string{"main": commitA}},
			"REPO", commitA, "cache", "main"},
		{"repo dir without refs: the newest snapshot",
			cacheRepo{snapshots: []snapshot{{commitA, tok}, {commitB, tok}}},
			"REPO", commitB, "cache", ""},
		{"repo dir whose refs/main names a missing snapshot: the only one",
			cacheRepo{snapshots: []snapshot{{commitB, tok}}, refs: map[string]string{"main": commitA}},
			"REPO", commitB, "cache", ""},
		{"snapshot dir given directly",
			cacheRepo{snapshots: []snapshot{{commitA, tok}, {commitB, tok}}, refs: map[string]string{"main": commitB}},
			"REPO/snapshots/" + commitA, commitA, "cache", ""},
		{"hub id at main",
			cacheRepo{snapshots: []snapshot{{commitA, tok}, {commitB, tok}}, refs: map[string]string{"main": commitA}},
			"org/model", commitA, "cache", "main"},
		{"hub id at a tag",
			cacheRepo{snapshots: []snapshot{{commitA, tok}, {commitB, tok}}, refs: map[string]string{"main": commitA, "v1.0": commitB}},
			"org/model@v1.0", commitB, "cache", "v1.0"},
		{"hub id at a commit",
			cacheRepo{snapshots: []snapshot{{commitA, tok}, {commitB, tok}}, refs: map[string]string{"main": commitA}},
			"org/model@" + commitB, commitB, "cache", commitB},
		{"hub id of a tiktoken model",
			cacheRepo{snapshots: []snapshot{{commitA, []string{"tiktoken.model", "tokenizer_config.json"}}}, refs: map[string]string{"main": commitA}},
			"org/model", commitA, "cache", "main"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			repoDir := tc.repo.write(t, cache, "org/model")
			arg := strings.Replace(tc.arg, "REPO", repoDir, 1)
			got, err := offlineConfig(cache).Resolve(context.Background(), arg)
			if err != nil {
				t.Fatal(err)
			}
			want := filepath.Join(repoDir, "snapshots", tc.wantCommit)
			if p, _ := filepath.Abs(got.Path); p != want {
				t.Errorf("path %s, want %s", got.Path, want)
			}
			if got.Commit != tc.wantCommit || got.From != tc.wantFrom || got.Repo != "org/model" || got.Revision != tc.wantRevision {
				t.Errorf("resolved %+v, want commit %s from %s, repo org/model, revision %q", got, tc.wantCommit, tc.wantFrom, tc.wantRevision)
			}
			if _, err := os.Stat(filepath.Join(got.Path, "tokenizer_config.json")); err != nil {
				t.Errorf("the snapshot's files do not resolve: %v", err)
			}
		})
	}
}

func TestResolveRefusesWhatItCannotRead(t *testing.T) {
	tests := []struct {
		name    string
		repo    cacheRepo
		arg     string
		offline bool
		want    []string
		wantErr error
	}{
		{"cached snapshot without a tokenizer, offline",
			cacheRepo{snapshots: []snapshot{{commitA, []string{"config.json"}}}, refs: map[string]string{"main": commitA}},
			"org/model", true, []string{"org/model", "HF_HUB_OFFLINE", "hf download org/model"}, hub.ErrNotCached},
		{"cached snapshot whose tokenizer blob is missing, offline",
			cacheRepo{snapshots: []snapshot{{commitA, []string{"tokenizer.json"}}}, refs: map[string]string{"main": commitA}},
			"org/model", true, []string{"not in the Hugging Face cache"}, hub.ErrNotCached},
		{"another revision than the cached one, offline",
			cacheRepo{snapshots: []snapshot{{commitA, []string{"tokenizer.json"}}}, refs: map[string]string{"main": commitA}},
			"org/model@v2", true, []string{"revision v2"}, hub.ErrNotCached},
		{"repo dir without snapshots",
			cacheRepo{}, "REPO", false, []string{"holds no snapshot", "hf download org/model"}, nil},
		{"neither a path nor a hub id",
			cacheRepo{}, "./no/such/dir", false, []string{"no such file", "not a Hugging Face hub id"}, os.ErrNotExist},
		{"a bare name is not a hub id",
			cacheRepo{}, "gpt2", false, []string{"not a Hugging Face hub id"}, os.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			repoDir := tc.repo.write(t, cache, "org/model")
			if tc.name == "cached snapshot whose tokenizer blob is missing, offline" {
				if err := os.RemoveAll(filepath.Join(repoDir, "blobs")); err != nil {
					t.Fatal(err)
				}
			}
			c := offlineConfig(cache)
			c.Offline = tc.offline
			_, err := c.Resolve(context.Background(), strings.Replace(tc.arg, "REPO", repoDir, 1))
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
		})
	}
}

// A relative path that exists is read as a path even when it is spelled
// like a hub id that is in the cache.
func TestResolvePrefersALocalPathToAHubID(t *testing.T) {
	cache := t.TempDir()
	cacheRepo{snapshots: []snapshot{{commitA, []string{"tokenizer.json"}}}, refs: map[string]string{"main": commitA}}.write(t, cache, "org/model")
	work := t.TempDir()
	writeFile(t, filepath.Join(work, "org", "model", "tokenizer.json"), "{}")
	t.Chdir(work)
	got, err := offlineConfig(cache).Resolve(context.Background(), "org/model")
	if err != nil {
		t.Fatal(err)
	}
	if got.From != "local" || got.Path != "org/model" {
		t.Fatalf("resolved %+v, want the local directory org/model", got)
	}
}

func TestParseID(t *testing.T) {
	tests := []struct {
		in       string
		repo     string
		revision string
	}{
		{"meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "main"},
		{"Qwen/Qwen3-8B@refs/pr/1", "Qwen/Qwen3-8B", "refs/pr/1"},
		{"org/m@" + commitA, "org/m", commitA},
		{"gpt2", "", ""},
		{"org/name/extra", "", ""},
		{"../org", "", ""},
		{"./org/name", "", ""},
		{"/abs/path", "", ""},
		{"org/na--me", "", ""},
		{"org/name@", "", ""},
		{"org/name@../../x", "", ""},
		{"org/name@a/", "", ""},
	}
	for _, tc := range tests {
		id, ok := hub.ParseID(tc.in)
		if ok != (tc.repo != "") || id.Repo != tc.repo || id.Revision != tc.revision {
			t.Errorf("ParseID(%q) = %+v, %v; want repo %q revision %q", tc.in, id, ok, tc.repo, tc.revision)
		}
	}
}

func TestFromEnv(t *testing.T) {
	home := t.TempDir()
	writeFile(t, filepath.Join(home, "hfhome", "token"), "hf_fromfile\n")
	writeFile(t, filepath.Join(home, "tokpath"), "hf_frompath")
	tests := []struct {
		name string
		env  map[string]string
		want hub.Config
	}{
		{"nothing set", map[string]string{"HOME": "/h"},
			hub.Config{CacheDir: "/h/.cache/huggingface/hub", Endpoint: "https://huggingface.co"}},
		{"XDG_CACHE_HOME", map[string]string{"HOME": "/h", "XDG_CACHE_HOME": "/x"},
			hub.Config{CacheDir: "/x/huggingface/hub", Endpoint: "https://huggingface.co"}},
		{"HF_HOME, its token file", map[string]string{"HOME": "/h", "XDG_CACHE_HOME": "/x", "HF_HOME": home + "/hfhome"},
			hub.Config{CacheDir: home + "/hfhome/hub", Endpoint: "https://huggingface.co", Token: "hf_fromfile"}},
		{"HF_HUB_CACHE wins, HF_TOKEN wins", map[string]string{"HF_HOME": home + "/hfhome", "HF_HUB_CACHE": "/c", "HF_TOKEN": "hf_env"},
			hub.Config{CacheDir: "/c", Endpoint: "https://huggingface.co", Token: "hf_env"}},
		{"HF_TOKEN_PATH, HF_ENDPOINT, HF_HUB_OFFLINE", map[string]string{"HOME": "/h", "HF_TOKEN_PATH": home + "/tokpath",
			"HF_ENDPOINT": "https://mirror.example/", "HF_HUB_OFFLINE": "1"},
			hub.Config{CacheDir: "/h/.cache/huggingface/hub", Endpoint: "https://mirror.example", Token: "hf_frompath", Offline: true}},
		{"HF_HUB_OFFLINE=0", map[string]string{"HOME": "/h", "HF_HUB_OFFLINE": "0"},
			hub.Config{CacheDir: "/h/.cache/huggingface/hub", Endpoint: "https://huggingface.co"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := hub.FromEnv(func(k string) string { return tc.env[k] })
			if got != tc.want {
				t.Errorf("FromEnv = %+v, want %+v", got, tc.want)
			}
		})
	}
}
