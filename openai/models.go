package openai

import (
	"context"
	"net/http"
	"slices"

	"google.golang.org/grpc"

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
	ctx, cc, release, err := h.clientOf(h.admin, r)
	if err != nil {
		return nil, err
	}
	defer release()
	resp, err := admin(cc).ListModels(ctx, &kvgatev1.ListModelsRequest{})
	if err != nil {
		return nil, err
	}
	out := []modelInfo{}
	var workers map[string]string // worker URL → the model it reports, read when needed
	for _, m := range resp.GetModels() {
		names := []string{m.GetName()}
		if m.GetName() == "" {
			// A router of one model serves every request under the name
			// its workers report (or any name, when they report none).
			if workers == nil {
				if workers, err = workerModels(ctx, cc); err != nil {
					return nil, err
				}
			}
			names = names[:0]
			for _, w := range m.GetWorkers() {
				if n := workers[w]; n != "" && !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
			if len(names) == 0 {
				names = append(names, modelName(""))
			}
		}
		for _, n := range names {
			out = append(out, modelInfo{ID: n, Object: "model", Created: h.now().Unix(), OwnedBy: "kvgate"})
		}
	}
	return out, nil
}

// workerModels maps each worker's URL to the model it reports.
func workerModels(ctx context.Context, cc *grpc.ClientConn) (map[string]string, error) {
	resp, err := admin(cc).ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, w := range resp.GetWorkers() {
		out[w.GetAddress()] = w.GetModel()
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
