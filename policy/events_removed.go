package policy

// pageNums is the table behind removals: a removed page's key to the number
// of its latest removal. Every page an engine's KV events remove passes
// through it (a full engine removes a page for each it stores), and a Go map
// churned that way (an insert and a delete per page, forever) fills with
// deleted-slot markers that lengthen every probe: 150–600 ns per removed
// page at 4,096 live keys, the largest single cost of applying a full
// engine's events. This table is open-addressed with linear probing and
// deletes by shifting the entries after the hole back, so a probe never
// walks over a deleted slot; its size is fixed at twice the keys removals
// can hold live (at most one per ring entry), so it never grows and its
// load stays at or below one half.
type pageNums struct {
	slots [pageSlots]pageSlot
}

// pageSlot is one entry; num 0 marks it empty (removal numbers start at 1).
type pageSlot struct {
	key uint64
	num uint64
}

// pageSlots is a power of two: a key's home is the top bits of its mix.
const (
	pageSlotBits = 13
	pageSlots    = 1 << pageSlotBits
	pageSlotMask = pageSlots - 1
	// pageMix spreads keys over the slots whatever bits of them vary
	// (Fibonacci hashing).
	pageMix = 0x9e3779b97f4a7c15
)

// The table's size must hold the ring's keys at a load of one half.
var _ [pageSlots - 2*removalsPerWorker]struct{}

func pageHome(k uint64) uint64 { return (k * pageMix) >> (64 - pageSlotBits) }

// get returns k's number, 0 when k is not in the table.
func (t *pageNums) get(k uint64) uint64 {
	for i := pageHome(k); ; i = (i + 1) & pageSlotMask {
		s := &t.slots[i]
		if s.num == 0 {
			return 0
		}
		if s.key == k {
			return s.num
		}
	}
}

// put sets k's number to n (n > 0). The caller keeps the live keys at most
// removalsPerWorker, so an empty slot is always found.
func (t *pageNums) put(k, n uint64) {
	for i := pageHome(k); ; i = (i + 1) & pageSlotMask {
		s := &t.slots[i]
		if s.num == 0 || s.key == k {
			s.key, s.num = k, n
			return
		}
	}
}

// delAt empties slot i, moving back each entry after it in its run whose
// home is not between the hole and the entry's slot: every key stays
// reachable from its home without crossing an empty slot.
func (t *pageNums) delAt(i uint64) {
	for j := (i + 1) & pageSlotMask; t.slots[j].num != 0; j = (j + 1) & pageSlotMask {
		// The entry at j may fill the hole at i when its home is not in
		// (i, j], cyclically: its distance from home is at least j-i.
		if h := pageHome(t.slots[j].key); (j-h)&pageSlotMask >= (j-i)&pageSlotMask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = pageSlot{}
}

// delIf removes k if its number is n: the ring's entry for k is being
// overwritten, and k was not removed again since. One probe, where a get
// and a del took two.
func (t *pageNums) delIf(k, n uint64) {
	for i := pageHome(k); ; i = (i + 1) & pageSlotMask {
		s := &t.slots[i]
		if s.num == 0 {
			return
		}
		if s.key == k {
			if s.num == n {
				t.delAt(i)
			}
			return
		}
	}
}

// len counts the keys in the table (for tests).
func (t *pageNums) len() int {
	n := 0
	for i := range t.slots {
		if t.slots[i].num != 0 {
			n++
		}
	}
	return n
}
