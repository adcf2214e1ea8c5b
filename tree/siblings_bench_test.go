package tree

import (
	"fmt"
	"testing"
)

// BenchmarkSiblingsSharingFirstToken is a selection below a node whose
// children all start with the same token and differ later in their first
// page: prompts that continue a shared system prompt with the same turn
// header and then ask different questions. Its cost must not grow with the
// number of such siblings (a lookup keyed by the first token alone compared
// the page against each of them).
func BenchmarkSiblingsSharingFirstToken(b *testing.B) {
	const page, system, question = 16, 1024, 256
	for _, siblings := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("%d-siblings", siblings), func(b *testing.B) {
			tr, err := New(Config{PageSize: page})
			if err != nil {
				b.Fatal(err)
			}
			prompt := func(i int) []uint32 {
				ids := make([]uint32, 0, system+question)
				for j := range system {
					ids = append(ids, uint32(j%5000)+1)
				}
				ids = append(ids, 7) // the turn header every question starts with
				for j := 1; j < question; j++ {
					ids = append(ids, uint32(10_000+i*question+j))
				}
				return ids
			}
			for i := range siblings {
				tr.Insert(prompt(i), "w")
			}
			probe := prompt(siblings + 1)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				tr.Match(probe)
			}
		})
	}
}
