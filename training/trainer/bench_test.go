package trainer

import (
	"context"
	"testing"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/mlx"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
)

// BenchmarkStepBackends is one training step as the trainer takes it (the
// next-token loss of a batch of 4 × 128 tokens, forward, backward to LoRA
// adapters of rank 8 on every linear layer of every block, Adam) on the
// bundled demo model in float32, on the mlx backend (where libmlxc loads) and
// on cpu: the step mlx-lm's trainer compiles, to compare with it on the same
// MLX build. ms is the best mean over three runs of 10 steps.
//
//	MLXC_LIB=… go test ./training/trainer -run '^$' -bench StepBackends -benchtime 1x
func BenchmarkStepBackends(b *testing.B) {
	for _, bn := range []string{"mlx", "cpu"} {
		be, err := mx.Open(bn)
		if err != nil {
			b.Logf("%s backend: %v", bn, err)
			continue
		}
		b.Run(bn, func(b *testing.B) {
			m, err := inference.Load("../../resources/demo", be)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := lora.Apply(m, lora.Config{NumLayers: 16, Rank: 8, Scale: 20}); err != nil {
				b.Fatal(err)
			}
			const B, L = 4, 128
			bt := data.Batch{B: B, L: L, IDs: make([]int32, B*L), Targets: make([]int32, B*L), Mask: make([]float32, B*L), Lengths: make([]int32, B), Rows: make([]int, B)}
			for r := range B {
				for i := range L + 1 {
					id := int32((i*7919 + r*104729 + 13) % 4000)
					if i < L {
						bt.IDs[r*L+i] = id
						bt.Mask[r*L+i] = 1
					}
					if i > 0 {
						bt.Targets[r*L+i-1] = id
					}
				}
				bt.Lengths[r], bt.Rows[r] = L, r
			}
			st := Stepper{Bind: Adapters(m), Optimizer: optim.NewAdam(optim.Constant(1e-5))}
			params := lora.Params(m)
			for range 3 {
				sr, err := st.Step(context.Background(), params, []Batch{NextToken(bt)})
				if err != nil {
					b.Fatal(err)
				}
				params = sr.Params
			}
			best := time.Hour
			for range 3 {
				t0 := time.Now()
				for range 10 {
					sr, err := st.Step(context.Background(), params, []Batch{NextToken(bt)})
					if err != nil {
						b.Fatal(err)
					}
					params = sr.Params
				}
				best = min(best, time.Since(t0)/10)
			}
			b.ReportMetric(float64(best.Microseconds())/1000, "ms/step")
			b.ReportMetric(B*L/best.Seconds(), "tok/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
