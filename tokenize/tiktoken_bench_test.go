package tokenize

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkTiktokenEncode is BenchmarkEncode (warm per-word cache) and
// BenchmarkEncodeCold (cache emptied before each iteration) for the tiktoken
// tokenizers, to be read next to BenchmarkEncode/llama3: llama3_tiktoken is the same
// vocabulary and pattern as llama3's tokenizer.json, so the two should match;
// o200k_base's pattern has no hand-written scanner and runs on regexp2.
func BenchmarkTiktokenEncode(b *testing.B) {
	docs := []struct{ name, file string }{{"4k", "long-4k.txt"}, {"64k", "long-64k.txt"}}
	for _, name := range tiktokenGoldens {
		b.Run(name, func(b *testing.B) {
			tok := loadTiktokenTest(b, name)
			for _, d := range docs {
				text, err := os.ReadFile(filepath.Join(testdataDir(), d.file))
				if err != nil {
					b.Fatalf("%v: run make testdata", err)
				}
				b.Run(d.name, func(b *testing.B) { benchEncode(b, tok, string(text)) })
				b.Run(d.name+"-cold", func(b *testing.B) { benchEncodeCold(b, tok, string(text)) })
			}
		})
	}
}

// BenchmarkTiktokenLoad measures building a tokenizer from a rank file (parsing, the
// merge table of every split, the byte-level tables): the cost at startup and for each
// GetTokenizer archive.
func BenchmarkTiktokenLoad(b *testing.B) {
	for _, name := range tiktokenGoldens {
		b.Run(name, func(b *testing.B) {
			dir := filepath.Join(testdataDir(), "tokenizers", name)
			file, ok, err := FindTiktoken(dir)
			if err != nil || !ok {
				b.Fatalf("%s: no tiktoken file (%v): run make testdata", dir, err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := loadTiktoken(file); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
