package server

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/pipeline"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// FuzzEmbedRequest decodes arbitrary bytes as an EmbedRequest with the
// router's codec and passes what decodes through Embed's checks (embedJob;
// the pipeline's FuzzEmbeddingCheck fuzzes the check against the workers'
// limits) on a router without a tokenizer. Nothing may panic; every refusal is INVALID_ARGUMENT, or
// FAILED_PRECONDITION for text with no tokenizer to read it; and what is
// accepted is within every limit the API states.
func FuzzEmbedRequest(f *testing.F) {
	for _, m := range []*kvgatev1.EmbedRequest{
		{RequestId: "e", Inputs: []*kvgatev1.EmbedInput{{InputIds: []uint32{1, 2, 3}}, {InputIds: []uint32{9}}}},
		{Model: "m", Inputs: []*kvgatev1.EmbedInput{{Text: "hello"}, {InputIds: []uint32{4}, Text: "both"}, {}}},
		{},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x1a, 0x02, 0x12, 0xff}) // inputs[0].text: invalid UTF-8
	codec := newRequestCodec()
	reg := workers.NewRegistry()
	s := &Server{pipe: pipeline.New(pipeline.Config{Registry: reg}), reg: reg, admission: newAdmission(DefaultAdmissionConfig(), nil)}
	s.models = modeltable.New(modeltable.OneModel, s.pipe.RegularPlacer)
	if _, _, err := s.models.Ensure("", func() (modeltable.Spec, error) {
		return modeltable.Spec{Policies: map[workers.Role]policy.Policy{workers.RoleRegular: policy.NewRoundRobin()}}, nil
	}); err != nil {
		f.Fatal(err)
	}
	if err := s.models.SetText("", modeltable.Text{}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &kvgatev1.EmbedRequest{}
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, req); err != nil {
			t.Fatalf("the codec failed (grpc-go would answer INTERNAL): %v", err)
		}
		if _, bad := undecodable(req); bad {
			return // answered INVALID_ARGUMENT before the handler (FuzzRequestCodec)
		}
		j, task, err := s.embedJob(context.Background(), req)
		if k, _ := fault.KindOf(err); k == fault.Precondition {
			return
		}
		if err != nil {
			wantInvalidArgument(t, "embedJob", err)
			return
		}
		cfg := s.admission.cfg
		n, total := len(task.Inputs()), 0
		if n == 0 || n > cfg.MaxEmbedInputs || len(req.GetModel()) > maxModelName || len(j.ID) > maxRequestIDBytes {
			t.Fatalf("accepted %d inputs, a model of %d bytes, an id of %d bytes", n, len(req.GetModel()), len(j.ID))
		}
		for i, ids := range task.Inputs() {
			if len(ids) == 0 {
				t.Fatalf("accepted an empty inputs[%d]", i)
			}
			total += len(ids)
		}
		if total > cfg.MaxEmbedTokens || !slices.Equal(j.InputIDs, task.Inputs()[0]) {
			t.Fatalf("accepted %d tokens; routing on %d ids", total, len(j.InputIDs))
		}
	})
}
