package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/kvgate/kvgate/tokenize"
	"github.com/kvgate/kvgate/tokenize/hub"
	"github.com/kvgate/kvgate/tokenize/template"
	"github.com/kvgate/kvgate/tokenize/textmodel"
)

// runTokenize prints the ids of TEXT, or with --batch turns a JSON array of
// strings on stdin into a JSON array of id arrays: a parity check against
// another tokenizer is one pipe away.
func runTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvgate tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("tokenizer", "", "tokenizer.json file or model directory (required)")
	addSpecial := fs.Bool("add-special-tokens", false, "add the tokenizer's special tokens (a BOS token, for instance)")
	batch := fs.Bool("batch", false, "read a JSON array of strings on stdin; write a JSON array of id arrays")
	decode := fs.Bool("decode", false, "the reverse: read ids (arguments, or with --batch a JSON array of id arrays) and print text")
	skipSpecial := fs.Bool("skip-special-tokens", false, "with --decode: leave special tokens out of the text")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("tokenize: --tokenizer is required")
	}
	tok, err := tokenize.Load(*path)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	switch {
	case *decode && *batch:
		var in [][]uint32
		if err := json.NewDecoder(stdin).Decode(&in); err != nil {
			return fmt.Errorf("tokenize --decode --batch: stdin must be a JSON array of id arrays: %w", err)
		}
		texts := make([]string, len(in))
		for i, ids := range in {
			if texts[i], err = tok.Decode(ids, *skipSpecial); err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
		}
		return enc.Encode(texts)
	case *decode:
		var ids []uint32
		for _, a := range fs.Args() {
			var id uint32
			if _, err := fmt.Sscan(a, &id); err != nil {
				return fmt.Errorf("tokenize --decode: %q is not a token id", a)
			}
			ids = append(ids, id)
		}
		text, err := tok.Decode(ids, *skipSpecial)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, text)
		return err
	case *batch:
		var in []string
		if err := json.NewDecoder(stdin).Decode(&in); err != nil {
			return fmt.Errorf("tokenize --batch: stdin must be a JSON array of strings: %w", err)
		}
		ids := make([][]uint32, len(in))
		for i, s := range in {
			if ids[i], err = tok.Encode(s, *addSpecial); err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			if ids[i] == nil {
				ids[i] = []uint32{}
			}
		}
		return enc.Encode(ids)
	}
	if fs.NArg() != 1 {
		return errors.New("tokenize: give the text as one argument (quote it), or use --batch")
	}
	ids, err := tok.Encode(fs.Arg(0), *addSpecial)
	if err != nil {
		return err
	}
	if ids == nil {
		ids = []uint32{}
	}
	return enc.Encode(ids)
}

// runChatTemplate renders a chat template: a model's, or a template file,
// with variables from a file; or a whole cases file (the shape of
// tokenize/template/testdata/cases.json) into a JSON report.
func runChatTemplate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvgate chat-template", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelPath := fs.String("model-path", "", "model directory, Hugging Face cache directory or hub id org/name[@revision], as kvgate serve takes: its chat template and special tokens")
	tmplPath := fs.String("template", "", "Jinja chat template file")
	messages := fs.String("messages", "", "JSON file: a list of messages, or an object of template variables (messages, tools, add_generation_prompt, ...)")
	cases := fs.String("cases", "", `cases file: {name: {"chat_template": ..., "data": {...}}}; writes {name: {"ok": true, "text": ...} | {"ok": false, "error": ...}}`)
	addGen := fs.Bool("add-generation-prompt", true, "with a list of messages: end with an assistant turn's header")
	now := fs.String("now", "", "the time strftime_now sees, RFC 3339 (default: the current time; cases.json was made at 2025-07-10T12:00:00Z)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	clock := time.Now
	if *now != "" {
		t, err := time.Parse(time.RFC3339, *now)
		if err != nil {
			return fmt.Errorf("--now: %w", err)
		}
		clock = func() time.Time { return t }
	}
	if *cases != "" {
		return renderCases(*cases, clock, stdout)
	}
	if *messages == "" {
		return errors.New("chat-template: --messages FILE is required (or --cases FILE)")
	}
	data, err := os.ReadFile(*messages)
	if err != nil {
		return err
	}
	v, err := template.DecodeJSON(data)
	if err != nil {
		return fmt.Errorf("--messages %s: %w", *messages, err)
	}
	vars := map[string]any{"add_generation_prompt": *addGen}
	switch x := v.(type) {
	case []any:
		vars["messages"] = x
	case *template.OrderedMap:
		for _, k := range x.Keys() {
			vars[k], _ = x.Get(k)
		}
	default:
		return fmt.Errorf("--messages %s: want a JSON array or object", *messages)
	}
	var text string
	switch {
	case *tmplPath != "":
		src, err := os.ReadFile(*tmplPath)
		if err != nil {
			return err
		}
		t, err := template.Compile(string(src))
		if err != nil {
			return err
		}
		if text, err = t.Render(vars, template.Options{Now: clock}); err != nil {
			return err
		}
	case *modelPath != "":
		src, err := modelFlags(*modelPath).resolve(context.Background(), hub.FromEnv(os.Getenv), slog.New(slog.NewTextHandler(stderr, nil)))
		if err != nil {
			return err
		}
		m, err := textmodel.Load(src, textmodel.Options{Now: clock})
		if err != nil {
			return err
		}
		conv := textmodel.Conversation{AddGenerationPrompt: *addGen}
		conv.Messages, _ = vars["messages"].([]any)
		conv.Tools, _ = vars["tools"].([]any)
		kw := template.NewOrderedMap()
		for k, v := range vars {
			if k != "messages" && k != "tools" {
				kw.Set(k, v)
			}
		}
		conv.Kwargs = kw
		if text, err = m.Render(conv); err != nil {
			return err
		}
	default:
		return errors.New("chat-template: give --model-path DIR or --template FILE")
	}
	_, err = io.WriteString(stdout, text)
	return err
}

type caseResult struct {
	OK    bool   `json:"ok"`
	Text  string `json:"text,omitempty"`
	Error string `json:"error,omitempty"`
}

func renderCases(path string, clock func() time.Time, stdout io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	v, err := template.DecodeJSON(data)
	if err != nil {
		return fmt.Errorf("--cases %s: %w", path, err)
	}
	all, ok := v.(*template.OrderedMap)
	if !ok {
		return fmt.Errorf("--cases %s: want a JSON object of cases", path)
	}
	results := map[string]caseResult{}
	for _, name := range all.Keys() {
		c, _ := all.Get(name)
		results[name] = renderCase(c, clock)
	}
	names := make([]string, 0, len(results))
	for n := range results {
		names = append(names, n)
	}
	sort.Strings(names)
	// Written by hand to keep the cases' order stable and text unescaped.
	var b strings.Builder
	b.WriteString("{\n")
	for i, n := range names {
		k, _ := json.Marshal(n)
		var rv strings.Builder
		enc := json.NewEncoder(&rv)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(results[n])
		fmt.Fprintf(&b, "  %s: %s", k, strings.TrimSpace(rv.String()))
		if i < len(names)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	_, err = io.WriteString(stdout, b.String())
	return err
}

func renderCase(c any, clock func() time.Time) caseResult {
	m, ok := c.(*template.OrderedMap)
	if !ok {
		return caseResult{Error: "case is not an object"}
	}
	src, _ := m.Get("chat_template")
	s, ok := src.(string)
	if !ok {
		return caseResult{Error: "case has no chat_template string"}
	}
	vars := map[string]any{}
	if d, ok := m.Get("data"); ok {
		if dm, ok := d.(*template.OrderedMap); ok {
			for _, k := range dm.Keys() {
				vars[k], _ = dm.Get(k)
			}
		}
	}
	t, err := template.Compile(s)
	if err != nil {
		return caseResult{Error: err.Error()}
	}
	text, err := t.Render(vars, template.Options{Now: clock})
	if err != nil {
		return caseResult{Error: err.Error()}
	}
	return caseResult{OK: true, Text: text}
}
