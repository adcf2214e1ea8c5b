//go:build !amd64 && !arm64

package stackroom

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
