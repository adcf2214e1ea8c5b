//go:build !race

package bench

// raceDetector tells whether the tests run under the race detector, where
// the simulated engines' load of a real tokenizer takes minutes.
const raceDetector = false
