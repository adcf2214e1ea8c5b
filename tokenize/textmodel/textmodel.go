// Package textmodel is the text side of one served model: its tokenizer,
// tokenizer caches and chat template, found and assembled the way the
// engines find them, so that the router's token ids are the engine's own.
//
// It is the seam between the server and the tokenize rooms: the server asks
// it to render a conversation, to encode a prompt (through the L0/L1 caches)
// and for a stream detokenizer; it never touches the tokenizer's parts.
package textmodel

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kvgate/kvgate/tokenize"
	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/tokenize/detok"
	"github.com/kvgate/kvgate/tokenize/template"
)

// Sources says where a model's tokenizer and chat template are, as the
// --model-path, --tokenizer-path and --chat-template flags give them.
type Sources struct {
	// ModelPath is a model directory, or a tokenizer.json file. A tiktoken
	// rank file (tiktoken.model, <encoding>.tiktoken) may stand in for
	// tokenizer.json, in a directory or given alone.
	ModelPath string
	// TokenizerPath overrides ModelPath for the tokenizer: a tokenizer.json
	// or tiktoken file, or a directory holding one.
	TokenizerPath string
	// ChatTemplatePath is a Jinja template file (or a chat_template.json);
	// it takes precedence over any template found beside the tokenizer.
	ChatTemplatePath string
}

// Options configures a Model.
type Options struct {
	Cache cache.Config
	// SplitSpecialTokensInContent decides how EncodeChat treats special-token
	// text written by the client, such as a user message containing
	// "<|im_end|>\n<|im_start|>system".
	//
	// Off (the default, as in Hugging Face transformers and the engines),
	// the rendered prompt is tokenized as a whole and such text becomes the
	// real control tokens: a user can forge a system turn.
	//
	// On, special-token text that came from the client (message contents,
	// names, reasoning_content, tool calls and their arguments, tools,
	// chat_template_kwargs) is tokenized as ordinary text, as with
	// transformers' split_special_tokens=True applied to that text only,
	// while the special tokens the template writes stay control tokens. A
	// fragment of a special token at either end of a client string is also
	// text, so that two client strings rendered side by side cannot join
	// into one. Non-special added tokens (DeepSeek V3's <｜User｜>, Qwen's
	// <think>) are matched as usual in both modes. Prompts whose client text
	// holds no special-token text tokenize identically in both modes; those
	// that do are not cached.
	SplitSpecialTokensInContent bool
	// Now is the clock behind the templates' strftime_now; nil: time.Now.
	Now func() time.Time
}

// Model is one model's tokenizer, caches and chat template. It is safe for
// concurrent use.
type Model struct {
	tok      *tokenize.Tokenizer
	enc      *cache.Cache
	tmpl     *template.Template // nil: the model has no chat template
	tmplFrom string
	tmplSrc  string
	specials map[string]any // bos_token, eos_token, ... for templates
	now      func() time.Time
	// splitContent is Options.SplitSpecialTokensInContent; specialTexts are
	// the texts of the tokenizer's special tokens, which it protects.
	splitContent bool
	specialTexts *specialSet
}

// files is a model's text assets by file name, wherever they came from.
type files map[string][]byte

// Load assembles a model from files on disk.
func Load(src Sources, opts Options) (*Model, error) {
	fsrc := src.TokenizerPath
	if fsrc == "" {
		fsrc = src.ModelPath
	}
	if fsrc == "" {
		return nil, errors.New("no tokenizer: give --model-path or --tokenizer-path")
	}
	fl, err := readDir(fsrc)
	if err != nil {
		return nil, err
	}
	if src.ModelPath != "" && src.TokenizerPath != "" {
		// Templates live with the model even when the tokenizer does not.
		if extra, err := readDir(src.ModelPath); err == nil {
			for k, v := range extra {
				if _, ok := fl[k]; !ok {
					fl[k] = v
				}
			}
		}
	}
	if err := readExplicit(fl, src.ChatTemplatePath); err != nil {
		return nil, err
	}
	return build(fl, opts)
}

// FromArchive assembles a model from an engine's GetTokenizer zip archive.
// chatTemplatePath, when not empty, overrides the archive's template.
func FromArchive(archive []byte, chatTemplatePath string, opts Options) (*Model, error) {
	fl, err := unzip(archive, maxArchiveContents)
	if err != nil {
		return nil, err
	}
	if err := readExplicit(fl, chatTemplatePath); err != nil {
		return nil, err
	}
	return build(fl, opts)
}

// maxArchiveContents bounds what a GetTokenizer archive's files decompress
// to, all together. The download itself is bounded (256 MiB), but deflate
// packs a thousand bytes of zeros into one: an engine's archive of a few
// small entries could otherwise make the router allocate gigabytes. The
// largest real tokenizer (Gemma 3's tokenizer.json) is about 33 MB.
const maxArchiveContents = 512 << 20

// unzip reads the files of a zip archive by base name, refusing an archive
// whose files decompress to more than limit bytes in all.
func unzip(archive []byte, limit int64) (files, error) {
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	if err != nil {
		return nil, fmt.Errorf("tokenizer archive: %w", err)
	}
	fl, left := files{}, limit
	for _, f := range zr.File {
		if f.FileInfo().IsDir() {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("tokenizer archive: %w", err)
		}
		// The header's sizes may lie: the bound is on what is read.
		b, err := io.ReadAll(io.LimitReader(rc, left+1))
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("tokenizer archive: %s: %w", f.Name, err)
		}
		if int64(len(b)) > left {
			return nil, fmt.Errorf("tokenizer archive: its files decompress to more than %d bytes (at %s)", limit, f.Name)
		}
		left -= int64(len(b))
		fl[filepath.Base(f.Name)] = b
	}
	return fl, nil
}

// explicitTemplate is the key under which a --chat-template's source is kept.
const explicitTemplate = "\x00explicit"

// readExplicit reads a --chat-template file: a Jinja template, or a
// chat_template.json ({"chat_template": "..."}).
func readExplicit(fl files, path string) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--chat-template: %w", err)
	}
	if strings.HasSuffix(path, ".json") {
		src, err := templateFromJSON(b)
		if err != nil {
			return fmt.Errorf("--chat-template %s: %w", path, err)
		}
		b = []byte(src)
	}
	fl[explicitTemplate] = b
	return nil
}

// templateFromJSON reads chat_template.json's {"chat_template": "..."}.
func templateFromJSON(b []byte) (string, error) {
	var v struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return "", err
	}
	return v.ChatTemplate, nil
}

// readDir reads a model directory's text assets, or a single tokenizer.json.
func readDir(path string) (files, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	fl := files{}
	if !st.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		fl[singleFileKey(path)] = b
		// tokenizer_config.json beside the file carries BOS/EOS and the template.
		if c, err := os.ReadFile(filepath.Join(filepath.Dir(path), "tokenizer_config.json")); err == nil {
			fl["tokenizer_config.json"] = c
		}
		return fl, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !(n == "tokenizer.json" || n == "tokenizer_config.json" || n == "chat_template.json" || strings.HasSuffix(n, ".jinja") || tokenize.IsTiktokenFile(n)) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(path, n))
		if err != nil {
			return nil, err
		}
		fl[n] = b
	}
	if !hasTokenizer(fl) {
		return nil, fmt.Errorf("%s holds no tokenizer.json, tiktoken.model or *.tiktoken file", path)
	}
	return fl, nil
}

func build(fl files, opts Options) (*Model, error) {
	tok, err := newTokenizer(fl)
	if err != nil {
		return nil, err
	}
	m := &Model{tok: tok, now: opts.Now, specials: specialTokens(fl["tokenizer_config.json"]), splitContent: opts.SplitSpecialTokensInContent}
	var specialTexts []string
	for _, a := range tok.AddedTokens() {
		if a.Special {
			specialTexts = append(specialTexts, a.Content)
		}
	}
	m.specialTexts = newSpecialSet(specialTexts)
	if m.now == nil {
		m.now = time.Now
	}
	src, from, err := findTemplate(fl, tok.Config().ChatTemplate)
	if err != nil {
		return nil, err
	}
	if src != "" {
		if m.tmpl, err = template.Compile(src); err != nil {
			return nil, fmt.Errorf("chat template (%s): %w", from, err)
		}
		m.tmplFrom, m.tmplSrc = from, src
	}
	// The cache scans for every added token, special or not: each one splits
	// the text before tokenization.
	var added []cache.AddedToken
	for _, a := range tok.AddedTokens() {
		added = append(added, cache.AddedToken(a))
	}
	m.enc = cache.New(tok, added, opts.Cache)
	return m, nil
}

// findTemplate picks the chat template in SMG's order: an explicit
// --chat-template, chat_template.json, chat_template.jinja, any other .jinja
// file (by name), then tokenizer_config.json's chat_template.
func findTemplate(fl files, fromConfig string) (src, from string, err error) {
	if b, ok := fl[explicitTemplate]; ok {
		return string(b), "--chat-template", nil
	}
	if b, ok := fl["chat_template.json"]; ok {
		src, err := templateFromJSON(b)
		if err != nil {
			return "", "", fmt.Errorf("chat_template.json: %w", err)
		}
		if src != "" {
			return src, "chat_template.json", nil
		}
	}
	if b, ok := fl["chat_template.jinja"]; ok {
		return string(b), "chat_template.jinja", nil
	}
	var jinjas []string
	for name := range fl {
		if strings.HasSuffix(name, ".jinja") && name != explicitTemplate {
			jinjas = append(jinjas, name)
		}
	}
	sort.Strings(jinjas)
	if len(jinjas) > 0 {
		return string(fl[jinjas[0]]), jinjas[0], nil
	}
	if fromConfig != "" {
		return fromConfig, "tokenizer_config.json", nil
	}
	return "", "", nil
}

// specialTokens reads the special tokens templates see as variables
// (bos_token, eos_token, unk_token, pad_token), as transformers passes them.
func specialTokens(config []byte) map[string]any {
	out := map[string]any{}
	if len(config) == 0 {
		return out
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(config, &raw) != nil {
		return out
	}
	for _, k := range []string{"bos_token", "eos_token", "unk_token", "pad_token"} {
		var s string
		if json.Unmarshal(raw[k], &s) == nil && s != "" {
			out[k] = s
			continue
		}
		var obj struct {
			Content string `json:"content"`
		}
		if json.Unmarshal(raw[k], &obj) == nil && obj.Content != "" {
			out[k] = obj.Content
		}
	}
	return out
}

// Tokenizer is the model's tokenizer.
func (m *Model) Tokenizer() *tokenize.Tokenizer { return m.tok }

// HasChatTemplate reports whether Render can work.
func (m *Model) HasChatTemplate() bool { return m.tmpl != nil }

// TemplateSource names where the chat template came from.
func (m *Model) TemplateSource() string { return m.tmplFrom }

// TemplateText is the chat template's Jinja source ("" without one), which
// tells what the model's answers look like: the markers it renders for
// reasoning and tool calls are the ones its answers use.
func (m *Model) TemplateText() string { return m.tmplSrc }

// Encode tokenizes text through the caches and caches the result: it is
// EncodeDeferred followed by commit. Use EncodeDeferred for requests that
// are still to be validated.
func (m *Model) Encode(text string, addSpecialTokens bool) ([]uint32, error) {
	ids, commit, err := m.EncodeDeferred(text, addSpecialTokens)
	if err != nil {
		return nil, err
	}
	commit()
	return ids, nil
}

// EncodeDeferred tokenizes text, using the caches for lookups, but stores
// the new entries only when commit is called, so that a caller that checks
// the ids afterwards (vocabulary, context length) caches valid requests
// only. commit is never nil, idempotent and cheap; not calling it caches
// nothing.
func (m *Model) EncodeDeferred(text string, addSpecialTokens bool) (ids []uint32, commit func(), err error) {
	return m.enc.EncodeDeferred(text, addSpecialTokens)
}

// EncodeDeferredLookup is EncodeDeferred that also says how the caches
// served the text.
func (m *Model) EncodeDeferredLookup(text string, addSpecialTokens bool) (ids []uint32, commit func(), lk cache.Lookup, err error) {
	return m.enc.EncodeDeferredLookup(text, addSpecialTokens)
}

// directBytes is the text length above which EncodeDeferredLimit tokenizes
// without the caches: a text over 1 MiB with its ids passes the caches'
// 2 MiB bound on one entry, so the caches would not keep it anyway.
const directBytes = 1 << 20

// EncodeDeferredLimit is EncodeDeferredLookup for a text that may have more
// than maxTokens tokens (0: no limit): a long text is tokenized without the
// caches and only until it passes the limit, with an error wrapping
// tokenize.ErrTooManyTokens, so that a multi-megabyte text costs memory in
// proportion to the limit. A text of no more bytes than maxTokens, or of at
// most 1 MiB, goes through the caches whole (its caller checks its length).
func (m *Model) EncodeDeferredLimit(text string, addSpecialTokens bool, maxTokens int) (ids []uint32, commit func(), lk cache.Lookup, err error) {
	if maxTokens <= 0 || len(text) <= max(maxTokens, directBytes) {
		return m.enc.EncodeDeferredLookup(text, addSpecialTokens)
	}
	ids, err = m.tok.EncodeLimit(text, addSpecialTokens, maxTokens)
	return ids, func() {}, lk, err
}

// CacheStats reports the tokenizer caches' counters.
func (m *Model) CacheStats() cache.Stats { return m.enc.Stats() }

// NewStream starts an incremental detokenizer for one generation.
func (m *Model) NewStream(opts detok.Options) *detok.Detokenizer { return detok.NewStream(m.tok, opts) }

// Conversation is what a chat template renders.
type Conversation struct {
	// Messages are template values (maps with role, content, ...).
	Messages []any
	// Tools are template values; nil renders as None.
	Tools []any
	// Kwargs are extra template variables (chat_template_kwargs).
	Kwargs *template.OrderedMap
	// AddGenerationPrompt ends the prompt with an assistant turn's header.
	AddGenerationPrompt bool
}

// ErrNoChatTemplate is returned by Render for a model without a template.
var ErrNoChatTemplate = errors.New("the model has no chat template")

// Render applies the chat template with the variables transformers passes:
// messages, tools, documents, add_generation_prompt, the special tokens, and
// the kwargs, which may override any of them.
func (m *Model) Render(c Conversation) (string, error) {
	if m.tmpl == nil {
		return "", ErrNoChatTemplate
	}
	vars := map[string]any{
		"messages":              c.Messages,
		"tools":                 nil,
		"documents":             nil,
		"add_generation_prompt": c.AddGenerationPrompt,
	}
	if len(c.Tools) > 0 {
		vars["tools"] = c.Tools
	}
	for k, v := range m.specials {
		vars[k] = v
	}
	if c.Kwargs != nil {
		for _, k := range c.Kwargs.Keys() {
			v, _ := c.Kwargs.Get(k)
			vars[k] = v
		}
	}
	return m.tmpl.Render(vars, template.Options{Now: m.now})
}
