//go:build amd64 || arm64

package stackroom

// Reserve16K makes sure the calling goroutine's stack is at least 16 KiB:
// enough for a gRPC client stream's Recv under a pump goroutine.
func Reserve16K()

// Reserve32K makes sure the calling goroutine's stack is at least 32 KiB:
// enough for a whole request on a server's stream goroutine.
func Reserve32K()
