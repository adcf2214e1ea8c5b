package parse

import (
	"fmt"
	"testing"
)

// BenchmarkToolParserTokenDeltas pushes a 4 KB answer (about 1,000 tokens)
// in 4-byte deltas, the size a detokenized token averages in English text
// and JSON: what parsing costs one Chat answer, as against the byte-by-byte
// worst case of BenchmarkToolParserByteByByte.
func BenchmarkToolParserTokenDeltas(b *testing.B) {
	const delta = 4
	for _, f := range ToolFormats() {
		answer := benchAnswer(f.Name, 4<<10)
		b.Run(fmt.Sprintf("%s/%dKB", f.Name, len(answer)>>10), func(b *testing.B) {
			b.SetBytes(int64(len(answer)))
			b.ReportAllocs()
			for range b.N {
				p := NewToolParser(f, ToolOptions{Tools: []string{"get_weather"}})
				var fo Fold
				for i := 0; i < len(answer); i += delta {
					fo.Add(p.Push(answer[i:min(i+delta, len(answer))]))
				}
				fo.Add(p.Flush())
				if a := fo.Answer(); a.Malformed || len(a.Calls) == 0 {
					b.Fatalf("%s: malformed %v, %d calls", f.Name, a.Malformed, len(a.Calls))
				}
			}
		})
	}
}

// BenchmarkToolParserWholeAnswer pushes an answer of many calls, and the
// hostile answers of BenchmarkToolParserHostile, in one delta (an engine
// that sends its output in one message): equal MB/s at 64 KB and 1 MB is
// what linear means. Text kept aside and put back before the rest of the
// input once per call made mistral's and harmony's quadratic here.
func BenchmarkToolParserWholeAnswer(b *testing.B) {
	for _, f := range ToolFormats() {
		for _, size := range []int{64 << 10, 1 << 20} {
			answers := map[string]string{"calls": benchAnswer(f.Name, size)}
			for _, h := range hostileAnswers(size) {
				answers[h.name] = h.answer
			}
			for name, answer := range answers {
				b.Run(fmt.Sprintf("%s/%s/%dKB", f.Name, name, size>>10), func(b *testing.B) {
					b.SetBytes(int64(len(answer)))
					for range b.N {
						p := NewToolParser(f, ToolOptions{Tools: []string{"get_weather"}})
						p.Push(answer)
						p.Flush()
					}
				})
			}
		}
	}
}
