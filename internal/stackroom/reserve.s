//go:build amd64 || arm64

// Each reserve is a frame of 12 or 24 KiB (reserve_other.go's small and
// large: with the stack's guard, a 16 or 32 KiB stack) that nothing reads
// or writes: the prologue the assembler adds checks the frame against the
// stack and grows the stack when it does not fit. The directive and the
// instruction are spelled alike for amd64 and arm64.

// func Reserve16K()
TEXT ·Reserve16K(SB), 0, $12288-0
	RET

// func Reserve32K()
TEXT ·Reserve32K(SB), 0, $24576-0
	RET
