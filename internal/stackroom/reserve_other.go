//go:build !amd64 && !arm64

package stackroom

// Frame sizes of the two reserves: a stack grows to the next power of two
// that holds the frame with the stack's guard, so 12 KiB gives a 16 KiB
// stack and 24 KiB a 32 KiB one.
const (
	small = 12 << 10
	large = 24 << 10
)

// Reserve16K makes sure the calling goroutine's stack is at least 16 KiB:
// enough for a gRPC client stream's Recv under a pump goroutine.
//
//go:noinline
func Reserve16K() {
	var room [small]byte
	touch(&room[0])
}

// Reserve32K makes sure the calling goroutine's stack is at least 32 KiB:
// enough for a whole request on a server's stream goroutine.
//
//go:noinline
func Reserve32K() {
	var room [large]byte
	touch(&room[0])
}

// touch keeps a reserve's frame from being optimised away; it does not
// make it escape.
//
//go:noinline
func touch(b *byte) { *b = 1 }
