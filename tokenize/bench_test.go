package tokenize

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkEncode measures single-goroutine encode throughput on the 4 KB and 64 KB
// documents of the golden corpus. b.SetBytes gives MB/s; tokens/op and tokens/s are
// reported as well. The per-word cache is warm after the first iteration, as it is in a
// running server (HF's reference keeps a similar cache).
func BenchmarkEncode(b *testing.B) {
	docs := []struct{ name, file string }{{"4k", "long-4k.txt"}, {"64k", "long-64k.txt"}}
	for _, name := range goldenTokenizers {
		b.Run(name, func(b *testing.B) {
			tok := loadTestTokenizer(b, name)
			for _, d := range docs {
				text, err := os.ReadFile(filepath.Join(testdataDir(), d.file))
				if err != nil {
					b.Fatalf("%v: run make testdata", err)
				}
				b.Run(d.name, func(b *testing.B) {
					benchEncode(b, tok, string(text))
				})
			}
		})
	}
}

// BenchmarkEncodeCold is BenchmarkEncode with the per-word caches emptied before every
// iteration (outside the timer): the cost of text never seen before, which is what the
// 64k/4k ratio should be judged on — a warm 4 KB document is all cache hits, while the
// 64 KB one has long pieces (CJK paragraphs, base64) that are too long to cache.
func BenchmarkEncodeCold(b *testing.B) {
	docs := []struct{ name, file string }{{"4k", "long-4k.txt"}, {"64k", "long-64k.txt"}}
	for _, name := range goldenTokenizers {
		b.Run(name, func(b *testing.B) {
			tok := loadTestTokenizer(b, name)
			for _, d := range docs {
				text, err := os.ReadFile(filepath.Join(testdataDir(), d.file))
				if err != nil {
					b.Fatalf("%v: run make testdata", err)
				}
				b.Run(d.name, func(b *testing.B) {
					benchEncodeCold(b, tok, string(text))
				})
			}
		})
	}
}

func benchEncodeCold(b *testing.B, tok *Tokenizer, text string) {
	b.SetBytes(int64(len(text)))
	var n int
	for b.Loop() {
		b.StopTimer()
		tok.model.resetCaches()
		b.StartTimer()
		ids, err := tok.Encode(text, true)
		if err != nil {
			b.Fatal(err)
		}
		n = len(ids)
	}
	b.ReportMetric(float64(n), "tokens/op")
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/s, "tokens/s")
	}
}

func benchEncode(b *testing.B, tok *Tokenizer, text string) {
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	var n int
	for b.Loop() {
		ids, err := tok.Encode(text, true)
		if err != nil {
			b.Fatal(err)
		}
		n = len(ids)
	}
	b.ReportMetric(float64(n), "tokens/op")
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/s, "tokens/s")
	}
}
