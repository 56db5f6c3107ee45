package inference

import (
	"context"
	"fmt"
	"slices"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// On MLX (where libmlxc loads) a decoding step queued block by block computes
// what the step queued whole does, bit for bit: through Append and through
// Generate's queued loop, with compiled blocks and as ops, in float32 and
// 4-bit, and past a growth of the cache's slots (its buffers updated in
// place while later blocks are still being built). Only quantized models on
// MLX's CPU device stage unless told otherwise.
func TestStagedStepsMLX(t *testing.T) {
	be, err := mx.Open("mlx")
	if err != nil {
		t.Skipf("mlx backend: %v", err)
	}
	onCPU := deviceOf(be) == "cpu"
	defer func() { stageMode, compileBlocks = 0, true }()
	for _, arch := range []string{"llama", "qwen3"} {
		for _, bits := range []int{0, 4} {
			for _, compiled := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/bits=%d/compiled=%v", arch, bits, compiled), func(t *testing.T) {
					cfg := tinyConfig(arch)
					cfg.HiddenSize, cfg.IntermediateSize = 64, 128
					if bits > 0 {
						cfg.Quantization = &Quantization{QuantParams: QuantParams{GroupSize: 32, Bits: bits}}
					}
					m := NewRandom(cfg, 7, be)
					stageMode = 0
					if got, want := stagesSteps(m), onCPU && bits > 0; got != want {
						t.Errorf("stages its steps: %v, want %v", got, want)
					}
					if c := NewRandom(cfg, 7, cpu(t)); stagesSteps(c) {
						t.Error("the cpu backend stages its steps")
					}
					compileBlocks = compiled
					ids := tokenSeq(slotStep+20, cfg.VocabSize, 4)
					run := func(mode int) ([][]float32, []int) {
						stageMode = mode
						logits := stepLogits(t, NewSession(m), ids)
						var toks []int
						if _, err := Generate(context.Background(), NewSession(m), ids[:5], GenerateOptions{MaxTokens: 24}, func(tok int) bool {
							toks = append(toks, tok)
							return false
						}); err != nil {
							t.Fatal(err)
						}
						return logits, toks
					}
					wantLogits, wantToks := run(-1)
					gotLogits, gotToks := run(1)
					for i := range wantLogits {
						if !slices.Equal(gotLogits[i], wantLogits[i]) {
							t.Fatalf("position %d: staged logits differ from whole steps' by %g", i+1, maxAbsDiff(gotLogits[i], wantLogits[i]))
						}
					}
					if !slices.Equal(gotToks, wantToks) || len(gotToks) != 24 {
						t.Errorf("generated %v staged, %v whole", gotToks, wantToks)
					}
				})
			}
		}
	}
}
