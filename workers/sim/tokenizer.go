package sim

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
)

// builtinTokenizer is the small byte-level BPE tokenizer with a ChatML chat
// template that scripts/simtokenizer generates. Serving it through
// GetTokenizer lets the embedded default accept text and chat with no model
// files, the way a real engine hands its tokenizer to a router.
//
//go:embed tokenizer/tokenizer.json tokenizer/tokenizer_config.json
var builtinTokenizer embed.FS

// tokenizerFiles are the files an engine's GetTokenizer archive carries, when
// present in the tokenizer directory.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "chat_template.json", "chat_template.jinja", "special_tokens_map.json"}

// tokenizerChunkSize is the size of each GetTokenizer message.
const tokenizerChunkSize = 1 << 20

// servedTokenizer is the tokenizer archive and what the engine takes from it.
type servedTokenizer struct {
	zip    []byte
	sha256 string
	// json and config are tokenizer.json and tokenizer_config.json, for
	// scripts written as text (script.go).
	json, config []byte
	vocab        int    // largest token id + 1
	eos          uint32 // id of tokenizer_config.json's eos_token
	hasEOS       bool
}

// loadTokenizer reads the tokenizer files from dir ("" = the built-in one)
// and zips them for GetTokenizer.
func loadTokenizer(dir string) (*servedTokenizer, error) {
	var fsys fs.FS = os.DirFS(dir)
	if dir == "" {
		sub, err := fs.Sub(builtinTokenizer, "tokenizer")
		if err != nil {
			return nil, err
		}
		fsys = sub
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	files := map[string][]byte{}
	for _, name := range tokenizerFiles {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			continue
		}
		files[name] = b
		w, err := zw.Create(name)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(b); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	tj, ok := files["tokenizer.json"]
	if !ok {
		return nil, fmt.Errorf("%w: TokenizerDir %s has no tokenizer.json", ErrInvalidConfig, filepath.Clean(dir))
	}
	st := &servedTokenizer{zip: buf.Bytes(), json: tj, config: files["tokenizer_config.json"]}
	sum := sha256.Sum256(st.zip)
	st.sha256 = hex.EncodeToString(sum[:])
	if err := st.readVocab(tj, files["tokenizer_config.json"]); err != nil {
		return nil, fmt.Errorf("%w: tokenizer in %q: %v", ErrInvalidConfig, dir, err)
	}
	return st, nil
}

// readVocab finds the vocabulary size and the EOS token's id.
func (st *servedTokenizer) readVocab(tokenizerJSON, configJSON []byte) error {
	var tj struct {
		Model struct {
			Vocab json.RawMessage `json:"vocab"`
		} `json:"model"`
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(tokenizerJSON, &tj); err != nil {
		return err
	}
	ids := map[string]int{}
	// BPE and WordPiece vocabularies are objects; Unigram's is a list of
	// [piece, score] pairs.
	var obj map[string]int
	if err := json.Unmarshal(tj.Model.Vocab, &obj); err == nil {
		ids = obj
	} else {
		var list [][2]any
		if err := json.Unmarshal(tj.Model.Vocab, &list); err != nil {
			return fmt.Errorf("model.vocab: %w", err)
		}
		for i, p := range list {
			if s, ok := p[0].(string); ok {
				ids[s] = i
			}
		}
	}
	for _, a := range tj.AddedTokens {
		ids[a.Content] = a.ID
	}
	for _, id := range ids {
		st.vocab = max(st.vocab, id+1)
	}
	var cfg struct {
		EOS any `json:"eos_token"`
	}
	if len(configJSON) > 0 {
		if err := json.Unmarshal(configJSON, &cfg); err != nil {
			return fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	eos, _ := cfg.EOS.(string)
	if m, ok := cfg.EOS.(map[string]any); ok { // {"content": "</s>", ...}
		eos, _ = m["content"].(string)
	}
	if id, ok := ids[eos]; ok && eos != "" {
		st.eos, st.hasEOS = uint32(id), true
	}
	return nil
}

// serve streams the archive in chunks; the last carries the SHA-256.
func (st *servedTokenizer) serve(stream grpc.ServerStreamingServer[smgcommon.GetTokenizerChunk]) error {
	data := st.zip
	for {
		n := min(len(data), tokenizerChunkSize)
		c := &smgcommon.GetTokenizerChunk{Data: data[:n]}
		data = data[n:]
		if len(data) == 0 {
			c.Sha256 = st.sha256
		}
		if err := stream.Send(c); err != nil {
			return err
		}
		if len(data) == 0 {
			return nil
		}
	}
}
