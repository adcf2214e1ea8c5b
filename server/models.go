package server

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/pd/pdplan"
	"github.com/kvgate/kvgate/pipeline"
	"github.com/kvgate/kvgate/workers"
)

// route is a model of the table as the pipeline uses it (pipeline.Route).
type route = pipeline.Route

// Models is the router's model table: what it knows of every model it serves.
// The router adds a model when its first worker joins and gives it its
// tokenizer; requests, metrics, Explain and ListModels read it.
func (s *Server) Models() *modeltable.Table[pipeline.Placer] { return s.models }

// noText is the fault of a request that needs r's tokenizer when it has
// none: UNAVAILABLE while it loads (a client retries), else
// FAILED_PRECONDITION saying what to configure.
func noText(r *route, field string) error {
	if r.TextLoading {
		return fault.Fieldf(fault.Unavailable, field, "%s needs model %q's tokenizer, which is loading; retry in a moment", field, r.Name)
	}
	return fault.Fieldf(fault.Precondition, field, "%s", noTokenizer(field))
}

// maxModelName bounds the model field: names are short identifiers such as
// "meta-llama/Llama-3.1-8B-Instruct".
const maxModelName = 256

// route finds the model a request names. Without --enable-igw the one model
// serves every request; a name its workers do not report is NOT_FOUND, since
// the client expects another model. With --enable-igw the name may be omitted
// only while one model is served.
func (s *Server) route(name string) (*route, error) {
	if len(name) > maxModelName {
		return nil, fault.Invalidf("model", "model is %d bytes; the limit is %d", len(name), maxModelName)
	}
	if s.models.Grouping() == modeltable.OneModel {
		r := s.models.Get("")
		if r == nil {
			return nil, fault.Newf(fault.Unavailable, "the model is starting: its workers are joining")
		}
		if name != "" && s.namesModels() && !s.servesName(name) {
			return nil, fault.Fieldf(fault.NotFound, "model", "model %q is not served here; this router serves %s",
				name, s.describeServed())
		}
		return r, nil
	}
	if r := s.models.Get(name); r != nil {
		return r, nil
	}
	if name == "" {
		switch rs := s.models.All(); len(rs) {
		case 1:
			return rs[0], nil
		case 0:
			return nil, fault.Newf(fault.Unavailable, "no model is served yet: no worker has joined")
		default:
			return nil, fault.Invalidf("model", "model is empty and this router serves %d models (%s); name one", len(rs), s.describeServed())
		}
	}
	if s.servesName(name) {
		// A worker reports it, and its routing context is being set
		// up: a moment's wait will do.
		return nil, fault.Fieldf(fault.Unavailable, "model", "model %q is starting: its workers are joining", name)
	}
	return nil, fault.Fieldf(fault.NotFound, "model", "model %q is not served here; this router serves %s", name, s.describeServed())
}

// servesName reports whether a registered worker reports model name.
func (s *Server) servesName(name string) bool {
	for _, w := range s.reg.Current().Workers {
		if w.Info().Model == name {
			return true
		}
	}
	return false
}

// namesModels reports whether any registered worker reports its model's
// name (engines that do not cannot be told apart from others).
func (s *Server) namesModels() bool {
	return slices.ContainsFunc(s.reg.Current().Workers, func(w *workers.Worker) bool { return w.Info().Model != "" })
}

// describeServed names the models the workers report, for error messages.
func (s *Server) describeServed() string {
	var names []string
	for _, w := range s.reg.Current().Workers {
		if m := w.Info().Model; m != "" && !slices.Contains(names, m) {
			names = append(names, m)
		}
	}
	for _, r := range s.models.All() {
		if r.Name != "" && !slices.Contains(names, r.Name) {
			names = append(names, r.Name)
		}
	}
	if len(names) == 0 {
		return "no named model (its workers report none)"
	}
	slices.Sort(names)
	for i, n := range names {
		names[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(names, ", ")
}

// newPlacer is the placer of the model r: PD's pairing when it has one
// (two-leg plans, pdplan), else its regular policy (the pipeline's).
func (s *Server) newPlacer(r *route) pipeline.Placer {
	if r.PD != nil {
		return pdplan.NewPlacer(s.pipe, s.metrics.pd, r)
	}
	return s.pipe.RegularPlacer(r)
}
