package hub

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The cache's layout, as huggingface_hub writes it:
//
//	models--org--name/
//	  blobs/<etag>                      the files' contents
//	  snapshots/<commit>/<file>         relative symlinks to ../../blobs/<etag>
//	  refs/<revision>                   the commit a branch or tag pointed to

// repoDirName is a repository's directory in the cache.
func repoDirName(repo string) string { return "models--" + strings.ReplaceAll(repo, "/", "--") }

// repoFromDirName is the hub id a models--org--name directory holds.
func repoFromDirName(name string) string {
	return strings.ReplaceAll(strings.TrimPrefix(name, "models--"), "--", "/")
}

// resolveLocalDir reads a directory given as a path: a cache repository
// directory is read at a snapshot, a snapshot directory says which commit
// it is, any other directory is read as it is.
func resolveLocalDir(dir string) (Resolved, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Resolved{}, err
	}
	base := filepath.Base(abs)
	if strings.HasPrefix(base, "models--") && isDir(filepath.Join(abs, "snapshots")) {
		snap, commit, err := pickSnapshot(abs)
		if err != nil {
			return Resolved{}, err
		}
		return Resolved{Path: snap, Repo: repoFromDirName(base), Revision: revisionOf(abs, commit), Commit: commit, From: "cache"}, nil
	}
	parent := filepath.Dir(abs)
	if filepath.Base(parent) == "snapshots" && strings.HasPrefix(filepath.Base(filepath.Dir(parent)), "models--") {
		repoDir := filepath.Dir(parent)
		return Resolved{Path: dir, Repo: repoFromDirName(filepath.Base(repoDir)), Revision: revisionOf(repoDir, base), Commit: base, From: "cache"}, nil
	}
	return Resolved{Path: dir, From: "local"}, nil
}

// pickSnapshot chooses the snapshot of a cache repository directory that
// refs/main points to; without one, the only snapshot, or else the most
// recently written.
func pickSnapshot(repoDir string) (path, commit string, err error) {
	if c, ok := readRef(repoDir, "main"); ok && isDir(filepath.Join(repoDir, "snapshots", c)) {
		return filepath.Join(repoDir, "snapshots", c), c, nil
	}
	entries, err := os.ReadDir(filepath.Join(repoDir, "snapshots"))
	if err != nil {
		return "", "", err
	}
	var newest os.FileInfo
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if newest == nil || info.ModTime().After(newest.ModTime()) {
			newest = info
		}
	}
	if newest == nil {
		return "", "", fmt.Errorf("%s holds no snapshot: download the model again (hf download %s)", repoDir, repoFromDirName(filepath.Base(repoDir)))
	}
	return filepath.Join(repoDir, "snapshots", newest.Name()), newest.Name(), nil
}

// revisionOf names the branch or tag of refs/ that points to commit, for the
// log; "" when none does.
func revisionOf(repoDir, commit string) string {
	var found string
	refs := filepath.Join(repoDir, "refs")
	_ = filepath.WalkDir(refs, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || found != "" {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == commit {
			found, _ = filepath.Rel(refs, p)
			found = filepath.ToSlash(found)
		}
		return nil
	})
	return found
}

// readRef reads refs/<rev>, the commit a branch or tag points to.
func readRef(repoDir, rev string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(repoDir, "refs", filepath.FromSlash(rev)))
	if err != nil {
		return "", false
	}
	c := strings.TrimSpace(string(b))
	return c, isCommit(c)
}

// cachedSnapshot finds a hub id's snapshot in the cache, if it holds a
// tokenizer: a snapshot that Python filled with other files only (a
// config.json) does not count, so the tokenizer is then fetched into it.
func cachedSnapshot(repoDir, rev string) (path, commit string, ok bool) {
	commit = rev
	if !isCommit(rev) {
		if commit, ok = readRef(repoDir, rev); !ok {
			return "", "", false
		}
	}
	path = filepath.Join(repoDir, "snapshots", commit)
	return path, commit, hasTokenizer(path)
}

// hasTokenizer reports whether a directory holds a tokenizer kvgate can
// read: tokenizer.json, or tiktoken files (a symlink to a missing blob does
// not count).
func hasTokenizer(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if n := e.Name(); n == "tokenizer.json" || isTiktoken(n) {
			if st, err := os.Stat(filepath.Join(dir, n)); err == nil && st.Mode().IsRegular() {
				return true
			}
		}
	}
	return false
}

// isTiktoken reports whether a file holds a tiktoken vocabulary.
func isTiktoken(name string) bool {
	return name == "tiktoken.model" || strings.HasSuffix(name, ".tiktoken")
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// writeAtomic writes data to path through a temporary file in the same
// directory, so that a reader (or a crash) never sees half a file.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// linkAtomic makes link a symlink to target, replacing what was there in one
// rename.
func linkAtomic(target, link string) error {
	f, err := os.CreateTemp(filepath.Dir(link), "."+filepath.Base(link)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name() // a unique name, for the link to take
	f.Close()
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
