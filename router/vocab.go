package router

import (
	"fmt"
	"slices"

	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
)

// vocabGuard keeps engines whose vocabulary does not fit out of the fleet.
// A tokenizer with more ids than an engine's vocab_size produces ids that
// engine rejects, and engines of one model that report different sizes
// serve different models; either way every Chat would fail at the engine
// with an error about input_ids, far from the cause. The guard says so once,
// at start-up or when the worker joins, naming the worker and both sizes.
//
// Each model is checked against its own tokenizer, whose size its entry in
// the model table keeps. Until a model is armed, its workers are admitted:
// the tokenizer is loaded after the workers connect (it may come from one
// of them), and arm then checks all of them at once.
type vocabGuard struct {
	reg    *workers.Registry
	models vocabTable
}

// vocabTable is what the guard needs of the model table.
type vocabTable interface {
	Grouping() modeltable.Grouping
	CheckVocab(name string, size int) error
	CheckedVocab(w *workers.Worker) (int, bool)
}

// admit is the workers' ConnectOptions.Admit.
func (v *vocabGuard) admit(w *workers.Worker) error {
	tok, armed := v.models.CheckedVocab(w)
	if !armed {
		return nil
	}
	return vocabMismatch(tok, w, v.reg.Snapshot())
}

// arm checks the registered workers of model against text (nil: no
// tokenizer, only the workers' agreement is checked) and one another, and
// from then on every worker of the model that joins. It arms before it
// looks, so that a worker joining meanwhile is checked by one or the other.
func (v *vocabGuard) arm(model string, text *textmodel.Model) error {
	tok := 0
	if text != nil {
		tok = text.Tokenizer().VocabSize()
	}
	if err := v.models.CheckVocab(model, tok); err != nil {
		return err
	}
	ws := slices.DeleteFunc(v.reg.Snapshot(), func(w *workers.Worker) bool { return v.models.Grouping().NameOf(w) != model })
	for i, w := range ws {
		if err := vocabMismatch(tok, w, ws[:i]); err != nil {
			return err
		}
	}
	return nil
}

// vocabMismatch says why w does not fit a tokenizer of tok ids (0: none)
// and the workers of its model among peers; nil when it fits or when a size
// is unknown (a worker not connected yet, or one reporting 0). The error
// wraps workers.ErrIncompatible.
func vocabMismatch(tok int, w *workers.Worker, peers []*workers.Worker) error {
	info := w.Info()
	if !w.Connected() || info.VocabSize <= 0 {
		return nil
	}
	if tok > info.VocabSize {
		return fmt.Errorf("worker %s: %w: the tokenizer has %d token ids but the worker's model %q has vocab_size %d, "+
			"so the ids of many prompts are out of its range; give --model-path (or --tokenizer-path) the model this worker serves, "+
			"or start the worker with the model the tokenizer belongs to", w.URL(), workers.ErrIncompatible, tok, info.Model, info.VocabSize)
	}
	for _, p := range peers {
		pi := p.Info()
		if p.URL() == w.URL() || !p.Connected() || pi.Model != info.Model || pi.VocabSize <= 0 || pi.VocabSize == info.VocabSize {
			continue
		}
		return fmt.Errorf("worker %s: %w: it serves %q with vocab_size %d, but worker %s serves it with vocab_size %d; "+
			"workers of one model must agree: start both engines from the same model files and revision",
			w.URL(), workers.ErrIncompatible, info.Model, info.VocabSize, p.URL(), pi.VocabSize)
	}
	return nil
}
