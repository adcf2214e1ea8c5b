package sim

import (
	"context"
	"slices"
	"strconv"
)

// Faults in what the engine reports rather than in whether it answers:
// usage that counts nothing, an out-of-vocabulary output id, a request that
// outlives its Abort, output beyond max_new_tokens. Real engines do each of
// these, and the router must believe what it saw over what it is told.

// misreport wraps a request's send with the reporting faults in force when
// it started. It returns the context the request runs on: with IgnoreAbort,
// one the client's cancellation does not reach, so the request runs to its
// end however its stream fares, and a send that fails (the client is gone)
// is dropped instead of ending the request.
func (e *Engine) misreport(ctx context.Context, r *request, send func(output) error) (context.Context, func(output) error) {
	f := e.Faults()
	if !f.UsageZero && !f.EmitOOV && !f.IgnoreAbort {
		return ctx, send
	}
	if f.IgnoreAbort {
		ctx = context.WithoutCancel(ctx)
	}
	pos, gone := 0, false
	oov := func(ids []uint32, base int) []uint32 {
		if i := f.EmitOOVAfter - base; f.EmitOOV && i >= 0 && i < len(ids) {
			ids = slices.Clone(ids)
			ids[i] = uint32(e.cfg.VocabSize)
		}
		return ids
	}
	return ctx, func(o output) error {
		if o.final == nil {
			o.tokens = oov(o.tokens, pos)
			pos += len(o.tokens)
		} else {
			fin := *o.final
			fin.outputIDs = oov(fin.outputIDs, 0)
			if f.UsageZero && r.stream {
				fin.outputIDs = nil
			}
			o.final = &fin
		}
		if f.UsageZero {
			o.completionTokens = 0
		}
		if gone {
			return nil
		}
		err := send(o)
		if err != nil && f.IgnoreAbort {
			gone = true
			return nil
		}
		return err
	}
}

// outputLimit is how many tokens r generates at most: its max new tokens,
// or with IgnoreMaxTokens twice that plus 8, within the context length.
func (e *Engine) outputLimit(r *request) int {
	if !e.Faults().IgnoreMaxTokens || (r.pd != nil && r.pd.prefill) {
		return r.maxNew
	}
	return max(min(2*r.maxNew+8, e.cfg.MaxContextLength-len(r.prompt)), r.maxNew)
}

// oovFlag sets Faults.EmitOOV and EmitOOVAfter from one flag value.
type oovFlag struct{ f *Faults }

func (v *oovFlag) String() string {
	if v.f == nil || !v.f.EmitOOV {
		return ""
	}
	return strconv.Itoa(v.f.EmitOOVAfter)
}

func (v *oovFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return err
	}
	v.f.EmitOOV, v.f.EmitOOVAfter = true, n
	return nil
}
