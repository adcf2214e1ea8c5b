package sim

import (
	"encoding/binary"
	"hash/fnv"
	"slices"
)

// Output tokens are a pure function of (Config.Seed, the request's seed, the
// prompt, the position), so a test or benchmark can replay a generation, and a
// router can be checked for passing seeds through. A real model's next token
// depends on the previous ones too, but those are themselves a function of the
// same inputs, so nothing observable is lost.

const golden = 0x9e3779b97f4a7c15

// mix64 is the splitmix64 finalizer: a cheap, well-mixing bijection.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// samplingSeed derives a request's stream seed. Greedy requests (temperature
// 0) ignore the request seed, as a real engine's argmax does.
func samplingSeed(engineSeed int64, reqSeed uint64, greedy bool, prompt []uint32) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, t := range prompt {
		binary.LittleEndian.PutUint32(b[:], t)
		h.Write(b[:])
	}
	s := mix64(uint64(engineSeed)+golden) ^ h.Sum64()
	if !greedy {
		s = mix64(s ^ mix64(reqSeed+0xd1b54a32d192ed03))
	}
	return s
}

// sampler decides each output token of one request.
type sampler struct {
	// script, when set, is the answer: its tokens, then EOS.
	script []uint32
	// cycle makes a script behave as a model's output under the request's
	// EOS rules (the echo reply): where EOS may not come yet (before
	// min_new_tokens, or with ignore_eos), the script starts over.
	cycle     bool
	seed      uint64
	vocab     uint64
	eos       uint32
	minNew    int
	ignoreEOS bool
	stopIDs   []uint32
}

// eosOdds: after min_new_tokens, each step ends with EOS with probability
// 1/eosOdds, which gives completions of ~64 tokens on average.
const eosOdds = 64

// next returns the token at position pos (0-based) and whether it ends the
// generation with finish reason "stop" (EOS, or one of stopIDs).
//
// Before min_new_tokens, EOS and stop tokens are never produced, as engines
// mask them. With ignore_eos, EOS may appear and does not stop.
func (s *sampler) next(pos int) (tok uint32, stop bool) {
	if s.script != nil {
		if pos < len(s.script) {
			return s.script[pos], false
		}
		if s.cycle && (s.ignoreEOS || pos < s.minNew) {
			if len(s.script) == 0 {
				return s.eos, false // nothing to repeat: EOS, which does not stop here
			}
			return s.script[pos%len(s.script)], false
		}
		return s.eos, true
	}
	x := mix64(s.seed + uint64(pos+1)*golden)
	canStop := pos >= s.minNew
	if canStop && !s.ignoreEOS && mix64(x)%eosOdds == 0 {
		return s.eos, true
	}
	tok = uint32(x % s.vocab)
	for i := 0; !canStop && (tok == s.eos || s.isStop(tok)) && i <= len(s.stopIDs)+1; i++ {
		tok = uint32((uint64(tok) + 1) % s.vocab)
	}
	if canStop && (s.isStop(tok) || (tok == s.eos && !s.ignoreEOS)) {
		return tok, true
	}
	return tok, false
}

func (s *sampler) isStop(tok uint32) bool { return slices.Contains(s.stopIDs, tok) }
