package openai

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// embeddingRequest is POST /v1/embeddings' body.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          *embeddingInput `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

func (e *embeddingRequest) proto() (*kvgatev1.EmbedRequest, error) {
	switch {
	case e.Input == nil || e.Input.count() == 0:
		return nil, invalidParam("input", "input is required: a string, a list of strings, a list of token ids or a list of lists of token ids")
	case e.EncodingFormat != "" && e.EncodingFormat != "float" && e.EncodingFormat != "base64":
		return nil, invalidParam("encoding_format", "encoding_format is %s; it must be \"float\" or \"base64\"", quote(e.EncodingFormat))
	case e.Dimensions != nil:
		return nil, invalidParam("dimensions", "dimensions is not supported: the vectors have the model's own size")
	}
	req := &kvgatev1.EmbedRequest{Model: e.Model}
	for _, t := range e.Input.texts {
		req.Inputs = append(req.Inputs, &kvgatev1.EmbedInput{Text: t})
	}
	for _, ids := range e.Input.ids {
		req.Inputs = append(req.Inputs, &kvgatev1.EmbedInput{InputIds: ids})
	}
	return req, nil
}

type embeddingList struct {
	Object string      `json:"object"`
	Data   []embedding `json:"data"`
	Model  string      `json:"model"`
	Usage  struct {
		PromptTokens uint32 `json:"prompt_tokens"`
		TotalTokens  uint32 `json:"total_tokens"`
	} `json:"usage"`
}

type embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or base64 of little-endian float32s
}

// embeddings serves POST /v1/embeddings through Router.Embed.
func (h *Handler) embeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingRequest
	ctx, rc, preq, release, ok := prepare(h, w, r, &req, (*embeddingRequest).proto)
	if !ok {
		return
	}
	defer release()
	resp, err := rc.Embed(ctx, preq)
	if err != nil {
		writeError(w, err)
		return
	}
	out := embeddingList{Object: "list", Model: modelName(req.Model), Data: []embedding{}}
	for i, e := range resp.GetEmbeddings() {
		var v any = e.GetEmbedding()
		if req.EncodingFormat == "base64" {
			v = float32Base64(e.GetEmbedding())
		}
		out.Data = append(out.Data, embedding{Object: "embedding", Index: i, Embedding: v})
	}
	out.Usage.PromptTokens = resp.GetUsage().GetPromptTokens()
	out.Usage.TotalTokens = out.Usage.PromptTokens
	setRequestID(w, r, resp.GetRequestId())
	writeJSON(w, http.StatusOK, out)
}

// float32Base64 is OpenAI's base64 encoding of a vector.
func float32Base64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}
