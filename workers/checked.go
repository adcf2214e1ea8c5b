package workers

import (
	"github.com/kvgate/kvgate/fault"
)

// CheckedStream wraps an engine's stream so that output no tokenizer could
// decode fails the stream instead of reaching a client: a token id at or
// above vocabSize (in a chunk or in the completion), or a completion whose
// output ids do not begin with the ids streamed before it (engines list the
// whole output there). Such a stream ends with a Corrupt fault naming the
// position and the id; the dispatcher should count it as the worker's
// failure. vocabSize 0 (unknown) skips the vocabulary check.
func CheckedStream(s Stream, vocabSize int) Stream {
	return &checkedStream{s: s, vocab: vocabSize}
}

type checkedStream struct {
	s        Stream
	vocab    int
	streamed []uint32
	err      error
}

func (c *checkedStream) Recv() (Chunk, error) {
	if c.err != nil {
		return Chunk{}, c.err
	}
	ch, err := c.s.Recv()
	if err != nil {
		return ch, err
	}
	if err := c.check(ch); err != nil {
		c.err = err
		return Chunk{}, err
	}
	return ch, nil
}

func (c *checkedStream) check(ch Chunk) error {
	if err := c.inVocab("chunk", len(c.streamed), ch.TokenIDs); err != nil {
		return err
	}
	c.streamed = append(c.streamed, ch.TokenIDs...)
	if ch.Final == nil {
		return nil
	}
	out := ch.Final.OutputIDs
	if err := c.inVocab("completion", 0, out); err != nil {
		return err
	}
	if len(out) == 0 {
		return nil // an aborted request's completion may list nothing
	}
	for i, id := range c.streamed {
		if i >= len(out) || out[i] != id {
			return fault.Newf(fault.Corrupt, "engine output is inconsistent: the completion lists %d token ids, but token %d streamed as %d", len(out), i, id)
		}
	}
	return nil
}

func (c *checkedStream) inVocab(where string, base int, ids []uint32) error {
	if c.vocab <= 0 {
		return nil
	}
	for i, id := range ids {
		if int64(id) >= int64(c.vocab) {
			return fault.Newf(fault.Corrupt, "engine output is corrupt: %s token %d is id %d, outside the vocabulary (size %d)", where, base+i, id, c.vocab)
		}
	}
	return nil
}
