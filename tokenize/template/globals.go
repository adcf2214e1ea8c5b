package template

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrTemplateRaised is wrapped by the error a template returns through
// raise_exception(message). The error's text is the template's message.
var ErrTemplateRaised = errors.New("template raised an exception")

// RaisedError is the error of raise_exception(message).
type RaisedError struct {
	Message string
}

func (e *RaisedError) Error() string { return e.Message }
func (e *RaisedError) Unwrap() error { return ErrTemplateRaised }

// maxRange is the sandbox's MAX_RANGE.
const maxRange = 100000

// globals are the names every template sees: Jinja's defaults plus the
// two transformers adds. Read-only after init.
var globals map[string]any

func init() {
	globals = map[string]any{
		"range":           &builtinFunc{name: "range", fn: globalRange},
		"namespace":       &builtinFunc{name: "namespace", fn: globalNamespace},
		"dict":            &builtinFunc{name: "dict", fn: globalDict},
		"cycler":          &builtinFunc{name: "cycler", fn: globalCycler},
		"joiner":          &builtinFunc{name: "joiner", fn: globalJoiner},
		"raise_exception": &builtinFunc{name: "raise_exception", fn: globalRaise},
		"strftime_now":    &builtinFunc{name: "strftime_now", fn: globalStrftimeNow},
	}
}

func globalRaise(r *renderer, a *callArgs) (any, error) {
	p, err := a.bind("raise_exception", []string{"message"}, nil)
	if err != nil {
		return nil, err
	}
	return nil, &RaisedError{Message: toStr(p[0])}
}

func globalStrftimeNow(r *renderer, a *callArgs) (any, error) {
	p, err := a.bind("strftime_now", []string{"format"}, nil)
	if err != nil {
		return nil, err
	}
	f, ok := p[0].(string)
	if !ok {
		return nil, fmt.Errorf("TypeError: strftime() argument 1 must be str, not %s", typeName(p[0]))
	}
	return strftime(r.now(), f), nil
}

func globalRange(r *renderer, a *callArgs) (any, error) {
	if len(a.kw) > 0 {
		return nil, errors.New("TypeError: range() takes no keyword arguments")
	}
	var bounds [3]int64
	for i, v := range a.pos {
		n, _, isF, ok := number(v)
		if !ok || isF {
			return nil, fmt.Errorf("TypeError: '%s' object cannot be interpreted as an integer", typeName(v))
		}
		if i < 3 {
			bounds[i] = n
		}
	}
	start, stop, step := int64(0), int64(0), int64(1)
	switch len(a.pos) {
	case 1:
		stop = bounds[0]
	case 2:
		start, stop = bounds[0], bounds[1]
	case 3:
		start, stop, step = bounds[0], bounds[1], bounds[2]
	default:
		return nil, fmt.Errorf("TypeError: range expected at most 3 arguments, got %d", len(a.pos))
	}
	if step == 0 {
		return nil, errors.New("ValueError: range() arg 3 must not be zero")
	}
	rng := pyRange{start: start, stop: stop, step: step}
	if rng.len() > maxRange {
		return nil, fmt.Errorf("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
	}
	return rng, nil
}

func kwargsMap(a *callArgs, into *OrderedMap) {
	for _, k := range a.kw {
		into.setAny(k.name, k.v)
	}
}

func globalNamespace(r *renderer, a *callArgs) (any, error) {
	ns := &Namespace{attrs: NewOrderedMap()}
	if len(a.pos) > 1 {
		return nil, errors.New("TypeError: namespace() takes at most one positional argument")
	}
	if len(a.pos) == 1 {
		if err := updateFrom(ns.attrs, a.pos[0]); err != nil {
			return nil, err
		}
	}
	kwargsMap(a, ns.attrs)
	return ns, nil
}

func globalDict(r *renderer, a *callArgs) (any, error) {
	m := NewOrderedMap()
	if len(a.pos) > 1 {
		return nil, errors.New("TypeError: dict expected at most 1 argument")
	}
	if len(a.pos) == 1 {
		if err := updateFrom(m, a.pos[0]); err != nil {
			return nil, err
		}
	}
	kwargsMap(a, m)
	return m, nil
}

// updateFrom is dict.update(src) for a mapping or a sequence of pairs.
func updateFrom(m *OrderedMap, src any) error {
	if d, ok := src.(*OrderedMap); ok {
		for i, k := range d.keys {
			m.setAny(k, d.vals[i])
		}
		return nil
	}
	items, err := iterate(src)
	if err != nil {
		return err
	}
	for _, it := range items {
		pair, err := iterate(it)
		if err != nil || len(pair) != 2 {
			return errors.New("ValueError: dictionary update sequence element has wrong length")
		}
		if err := checkHashable(pair[0]); err != nil {
			return err
		}
		m.setAny(pair[0], pair[1])
	}
	return nil
}

// cycler is Jinja's cycler(*items).
type cycler struct {
	items []any
	pos   int
}

func (c *cycler) call(name string, a *callArgs) (any, error) {
	switch name {
	case "next":
		v := c.items[c.pos]
		c.pos = (c.pos + 1) % len(c.items)
		return v, nil
	case "reset":
		c.pos = 0
		return nil, nil
	}
	return nil, fmt.Errorf("AttributeError: 'Cycler' object has no attribute '%s'", name)
}

func globalCycler(r *renderer, a *callArgs) (any, error) {
	if len(a.pos) == 0 {
		return nil, errors.New("RuntimeError: at least one item has to be provided")
	}
	return &cycler{items: append([]any(nil), a.pos...)}, nil
}

func globalJoiner(r *renderer, a *callArgs) (any, error) {
	p, err := a.bind("joiner", []string{"sep"}, []any{", "})
	if err != nil {
		return nil, err
	}
	sep := toStr(p[0])
	used := false
	return &builtinFunc{name: "joiner", fn: func(r *renderer, a *callArgs) (any, error) {
		if !used {
			used = true
			return "", nil
		}
		return sep, nil
	}}, nil
}

var (
	weekdays = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	months   = []string{"January", "February", "March", "April", "May", "June", "July",
		"August", "September", "October", "November", "December"}
)

// strftime formats t as Python's datetime.strftime does on glibc in the C
// locale, including glibc's "%-d" (no padding) flag.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' || i+1 >= len(f) {
			b.WriteByte(c)
			continue
		}
		i++
		pad := true
		if f[i] == '-' && i+1 < len(f) {
			pad = false
			i++
		}
		num := func(v, width int) {
			s := strconv.Itoa(v)
			if pad {
				for len(s) < width {
					s = "0" + s
				}
			}
			b.WriteString(s)
		}
		hour12 := t.Hour() % 12
		if hour12 == 0 {
			hour12 = 12
		}
		switch f[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			s := strconv.Itoa(t.Day())
			if pad && len(s) < 2 {
				s = " " + s
			}
			b.WriteString(s)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num(hour12, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'f':
			num(t.Nanosecond()/1000, 6)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'A':
			b.WriteString(weekdays[t.Weekday()])
		case 'a':
			b.WriteString(weekdays[t.Weekday()][:3])
		case 'B':
			b.WriteString(months[t.Month()-1])
		case 'b', 'h':
			b.WriteString(months[t.Month()-1][:3])
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			b.WriteString(strconv.Itoa(wd))
		case 'D':
			b.WriteString(strftime(t, "%m/%d/%y"))
		case 'F':
			b.WriteString(strftime(t, "%Y-%m-%d"))
		case 'T':
			b.WriteString(strftime(t, "%H:%M:%S"))
		case 'R':
			b.WriteString(strftime(t, "%H:%M"))
		case 'c':
			b.WriteString(strftime(t, "%a %b %e %H:%M:%S %Y"))
		case 'x':
			b.WriteString(strftime(t, "%m/%d/%y"))
		case 'X':
			b.WriteString(strftime(t, "%H:%M:%S"))
		case 'Z':
			name, _ := t.Zone()
			if t.Location() != time.Local && t.Location() != time.UTC {
				b.WriteString(name)
			}
		case 'z':
			if t.Location() != time.Local && t.Location() != time.UTC {
				b.WriteString(t.Format("-0700"))
			}
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if !pad {
				b.WriteByte('-')
			}
			b.WriteByte(f[i])
		}
	}
	return b.String()
}
