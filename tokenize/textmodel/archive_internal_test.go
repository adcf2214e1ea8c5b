package textmodel

import (
	"archive/zip"
	"bytes"
	"strings"
	"testing"
)

// zipOf returns a zip archive of the named files, each size bytes of
// zeros (which deflate packs about a thousandfold).
func zipOf(t *testing.T, size int, names ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range names {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestUnzipBoundsWhatTheFilesDecompressTo: an archive is refused, naming
// the bound, once its files together decompress to more than it, however
// small the archive; one within the bound is read whole.
func TestUnzipBoundsWhatTheFilesDecompressTo(t *testing.T) {
	const limit = 1 << 20
	tests := []struct {
		name    string
		size    int
		files   []string
		wantErr string // "" for success
	}{
		{"within the bound", limit / 4, []string{"tokenizer.json", "tokenizer_config.json"}, ""},
		{"exactly the bound", limit / 2, []string{"a.json", "b.json"}, ""},
		{"one file past it", limit + 1, []string{"tokenizer.json"}, "more than 1048576 bytes (at tokenizer.json)"},
		{"many files past it together", limit / 3, []string{"a", "b", "c", "d"}, "more than 1048576 bytes (at d)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			archive := zipOf(t, tt.size, tt.files...)
			fl, err := unzip(archive, limit)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("unzip of %d bytes: err %v, want one containing %q", len(archive), err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range tt.files {
				if len(fl[n]) != tt.size {
					t.Errorf("%s: %d bytes, want %d", n, len(fl[n]), tt.size)
				}
			}
		})
	}
}
