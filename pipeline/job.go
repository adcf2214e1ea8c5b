package pipeline

import (
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/kvgate/kvgate/answer"
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// Job is one generation, however the client asked for it: token ids, text
// or a conversation all become a prompt of ids and a way to send replies.
type Job struct {
	ID string
	// Route is the model the request runs on.
	Route    *Route
	InputIDs []uint32
	Sampling *kvgatev1.SamplingParams
	Stream   bool
	Start    time.Time
	Send     func(chunk *kvgatev1.GenerateChunk, done *kvgatev1.GenerateComplete) error
	// failed are the workers earlier attempts failed on: no later
	// attempt of the job goes there.
	failed []string
	// unfit are, for each role (a request's leg), the workers whose own
	// limits the prompt exceeds while others' hold it, as the latest
	// check of that leg found them (fit). A later check replaces them:
	// an engine that restarted with larger limits may take the job.
	unfit [workers.RoleDecode + 1][]string
	// leftOut names, for each role (a request's leg), the workers the
	// latest check of that leg excluded for their limits and why, for
	// Explain and the request's log (LeftOut); "" when none was.
	leftOut [workers.RoleDecode + 1]string
	// full are the engines at their running-request limit when the
	// attempt was bound, with Binding.AvoidFull: it is placed elsewhere.
	full []string
	// reserved: the job is bound and not yet placed (see gate.reserve).
	reserved bool
	// onlyFree: late binding's matching bound the attempt from the queue
	// for an engine with room, so it is placed only on engines with room
	// (gate.placing), as with Binding.AvoidFull.
	onlyFree bool
	// Priority is the request's class in the router's queue: lower is
	// bound first (the kvgate-priority metadata, as vLLM's request
	// priority); 0 by default.
	Priority int
	// Commit, when set, caches the prompt's tokenization; called once the
	// request has passed validation against the workers, so that invalid
	// prompts never occupy the tokenizer caches.
	Commit func()
	// Span is the request's span (nil when untraced, as for Explain).
	Span trace.Span
	// Task is what the job's attempts do on their workers: generate, or
	// embed.
	Task Task
	// Answer reads a Chat's output into its answer (reasoning, tool
	// calls) and may constrain it (response_format, tool_choice); nil: the
	// output is raw text.
	Answer *answer.Shaper
	// model names the request's model in metrics (set by the pipeline).
	model string
	// Routing is the request's routing metadata as the policy sees it
	// (routing key, target worker, implicit key), which the front reads
	// from the call; nil: none.
	Routing *policy.Request
	// Needs, when set, is the optional engine RPC the job's attempts call
	// (Embed): only workers that have not shown they lack it are placed.
	Needs workers.RPC
}

// LeftOut says which workers the job's prompt was kept from because it is
// longer than they accept, and why ("" when none was): for a
// disaggregated request, each leg's.
func (j *Job) LeftOut() string {
	var note string
	for _, n := range j.leftOut {
		switch {
		case n == "":
		case note == "":
			note = n
		default:
			note += "; " + n
		}
	}
	return note
}

// PolicyRequest is what the policy sees of an attempt of the job: its
// routing metadata, its prompt and the workers earlier attempts failed on.
// Each attempt gets a Request of its own, since the policies may keep it
// until the attempt ends and Exclude grows between attempts.
func (j *Job) PolicyRequest(dryRun bool) *policy.Request {
	if j.Routing == nil {
		j.Routing = &policy.Request{RequestID: j.ID}
	}
	r := *j.Routing
	r.InputIDs, r.DryRun, r.Exclude = j.InputIDs, dryRun, j.excluded()
	r.ComputesPrompt = j.Sampling.GetPromptLogprobs()
	if len(j.full) > 0 {
		r.Exclude = append(slices.Clip(r.Exclude), j.full...)
	}
	return &r
}

// excluded lists the workers no attempt of j may be placed on now: those
// earlier attempts failed on and those the latest checks found too small.
// Each is listed once; with none too small, it is j.failed itself, not a
// copy.
func (j *Job) excluded() []string {
	n := 0
	for _, u := range j.unfit {
		n += len(u)
	}
	if n == 0 {
		return j.failed
	}
	out := make([]string, 0, len(j.failed)+n)
	out = append(out, j.failed...)
	for _, u := range j.unfit {
		for _, url := range u {
			if !slices.Contains(out, url) {
				out = append(out, url)
			}
		}
	}
	return out
}
