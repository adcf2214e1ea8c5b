package openai

import (
	"net/http"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

type modelList struct {
	Object string      `json:"object"`
	Data   []modelInfo `json:"data"`
}

type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// listModels asks Admin.ListModels, with the caller's key: where Admin has
// a key of its own, listing models needs it, as on the gRPC side.
func (h *Handler) listModels(r *http.Request) ([]modelInfo, error) {
	ctx, cc, release, err := h.client(r)
	if err != nil {
		return nil, err
	}
	defer release()
	resp, err := admin(cc).ListModels(ctx, &kvgatev1.ListModelsRequest{})
	if err != nil {
		return nil, err
	}
	out := []modelInfo{}
	for _, m := range resp.GetModels() {
		out = append(out, modelInfo{ID: m.GetName(), Object: "model", Created: h.now().Unix(), OwnedBy: "kvgate"})
	}
	return out, nil
}

// models serves GET /v1/models.
func (h *Handler) models(w http.ResponseWriter, r *http.Request) {
	ms, err := h.listModels(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: ms})
}

// model serves GET /v1/models/{model}.
func (h *Handler) model(w http.ResponseWriter, r *http.Request) {
	ms, err := h.listModels(r)
	if err != nil {
		writeError(w, err)
		return
	}
	name := r.PathValue("model")
	for _, m := range ms {
		if m.ID == name {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	writeError(w, &apiError{status: http.StatusNotFound, kind: "invalid_request_error", param: "model", code: "model_not_found",
		message: "the model " + quote(name) + " is not served here (GET /v1/models lists them)"})
}
