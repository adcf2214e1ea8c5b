package workers

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The size of an engine's answer on the wire. gRPC refuses a received
// message above the connection's limit (4 MiB unless told otherwise), and
// the refusal is the router's own: the engine did nothing wrong. So the
// limit must hold every answer a valid request can produce, and a request
// whose answer could not fit must be refused before it is sent.
//
// Both protocols carry log-probabilities as packed parallel arrays (sglang
// OutputLogProbs/InputLogProbs/TopLogProbs; vLLM's are the same shape), so
// one position costs at most:
//   - per entry (the chosen token and each of its top-k alternatives): a
//     float (4 bytes) and a token id (a varint of at most 5 bytes);
//   - per position: the framing of its TopLogProbs message and of the
//     prompt's optional value (tags and length prefixes, under 24 bytes);
//   - per output token: its id once more in output_ids (5 bytes).
//
// A completion may repeat everything streamed before it, so the bound is
// for the prompt and the whole output in one message.
const (
	logprobEntryBytes    = 4 + 5
	logprobPositionBytes = 24
	outputIDBytes        = 5
	// answerFixedBytes covers a message's other fields: counters, finish
	// reason, a matched stop string (the router allows 1 KiB), request id.
	answerFixedBytes = 64 << 10

	// MaxTopLogprobs is the most alternatives per position a request may
	// ask for, as OpenAI's API allows.
	MaxTopLogprobs = 20
	// AnswerContextTokens is the longest context whose every position's
	// log-probabilities at MaxTopLogprobs fit DefaultMaxAnswerBytes:
	// 256Ki tokens, twice Llama 3.1's context. A request beyond it (a
	// longer-context model asked for prompt_logprobs) is refused before it
	// is sent, naming the limit.
	AnswerContextTokens = 256 << 10
	// DefaultMaxAnswerBytes is the receive limit of engine connections:
	// the largest answer to a request with AnswerContextTokens positions
	// of log-probabilities at MaxTopLogprobs, about 55 MiB. gRPC allocates
	// a message's actual size, not the limit.
	DefaultMaxAnswerBytes = AnswerContextTokens*(outputIDBytes+logprobPositionBytes+(MaxTopLogprobs+1)*logprobEntryBytes) + answerFixedBytes
)

// AnswerBytes bounds the largest message an engine sends in answer to a
// request of promptTokens input ids generating at most outputTokens, with
// log-probabilities as lp asks (nil: none).
func AnswerBytes(promptTokens, outputTokens int, lp *LogprobRequest) int64 {
	n := int64(answerFixedBytes) + int64(outputTokens)*outputIDBytes
	if lp == nil {
		return n
	}
	perPosition := int64(logprobPositionBytes + (max(lp.TopK, 0)+1)*logprobEntryBytes)
	if lp.Prompt {
		n += int64(promptTokens) * perPosition
	}
	if lp.Output {
		n += int64(outputTokens) * perPosition
	}
	return n
}

// LocalLimit reports whether err is a limit gRPC enforced in this process on
// an engine call (a message received or to be sent beyond the connection's
// size limit), which says nothing about the engine. gRPC reports it as
// RESOURCE_EXHAUSTED with a message of its own, the one thing that tells it
// from an engine's RESOURCE_EXHAUSTED (an engine out of memory has failed).
func LocalLimit(err error) bool {
	if status.Code(err) != codes.ResourceExhausted {
		return false
	}
	msg := status.Convert(err).Message()
	for _, s := range []string{
		"grpc: received message larger than max",
		"grpc: received message after decompression larger than max",
		"grpc: trying to send message larger than max",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
