package template

import (
	"fmt"
	"strings"
)

// The renderer's bounds. Jinja's sandbox bounds range() (MAX_RANGE) and
// nothing else: a template can loop, or double a string, until the process
// runs out of time or memory, and a template is not always the operator's
// own (an engine sends its tokenizer's, GetTokenizer). A render that would
// pass one fails instead, with a MemoryError naming it. Real chat templates
// loop over the messages, their parts and the tools a few times, and make
// text about as long as the conversation: the bounds are far beyond what
// any prompt a context holds needs.
const (
	// maxText bounds any string a template makes, and its output.
	maxText = 64 << 20
	// maxItems bounds any list or tuple a template makes.
	maxItems = 1 << 22
	// maxSteps bounds the loop iterations and macro calls of one render.
	maxSteps = 1 << 21
	// maxJSONIndent bounds tojson's indent, which is repeated on every
	// line at every depth.
	maxJSONIndent = 1 << 10
)

// sizeFits returns a MemoryError when n units of what (bytes of a string,
// items of a list) would be past limit.
func sizeFits(n, limit int64, what string) error {
	if n > limit || n < 0 {
		return fmt.Errorf("MemoryError: the template would make %s of %d, past the renderer's bound of %d", what, n, limit)
	}
	return nil
}

// textFits checks a string of n bytes.
func textFits(n int64) error { return sizeFits(n, maxText, "a string") }

// itemsFit checks a list of n items.
func itemsFit(n int64) error { return sizeFits(n, maxItems, "a list") }

// repeatFits checks unit × times against limit without overflowing.
func repeatFits(unit int, times, limit int64, what string) error {
	if unit > 0 && times > limit/int64(unit) {
		return fmt.Errorf("MemoryError: the template would make %s of %d × %d, past the renderer's bound of %d", what, unit, times, limit)
	}
	return nil
}

// replacedFits checks the string strings.Replace(s, old, new, n) makes.
func replacedFits(s, old, new string, n int) error {
	if len(new) <= len(old) {
		return nil
	}
	k := int64(len(s)) + 1 // an empty old matches between every two bytes
	if old != "" {
		k = int64(strings.Count(s, old))
	}
	if n >= 0 {
		k = min(k, int64(n))
	}
	if err := repeatFits(len(new)-len(old), k, maxText, "a string's growth"); err != nil {
		return err
	}
	return textFits(int64(len(s)) + k*int64(len(new)-len(old)))
}

// step counts one loop iteration or macro call.
func (r *renderer) step() error {
	r.steps++
	if r.steps > maxSteps {
		return fmt.Errorf("MemoryError: the template ran past the renderer's bound of %d loop iterations and macro calls", maxSteps)
	}
	return nil
}

// write appends s to the output.
func (r *renderer) write(s string) error {
	if err := textFits(int64(r.out.Len()) + int64(len(s))); err != nil {
		return fmt.Errorf("%w (its output)", err)
	}
	r.out.WriteString(s)
	return nil
}
