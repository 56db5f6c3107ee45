package lora

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
)

// BenchmarkLoRAStep measures one LoRA training step (forward, backward to the
// adapters, no optimizer) at sequence 512 on random-weight models with the real
// configs of SmolLM2-135M and Qwen3-0.6B, dense f32 and 4-bit (QLoRA). It reports
// tokens/s, achieved GFLOP/s (forward 2·N·T plus the input-gradient half of the
// backward 2·N·T, N the non-embedding weights plus the output projection; frozen
// weights need no weight gradient) and the cpu backend's peak memory during the steps
// (reset after the model is built: quantizing a random model holds its float32 weights
// for a while, and earlier sub-benchmarks' peaks must not count). The loss is the
// trainer's (inference.Model.Loss, in chunks); the "ckpt" variants recompute every
// block in the backward pass (trainer.Options.GradCheckpoint), whose extra forward
// pass is not counted in GFLOP/s. Run each configuration in a process of its own for
// its peak: go test -run '^$' -bench 'LoRAStep/Qwen3-0.6B/q4/ckpt' -benchtime 2x ./training/lora/
func BenchmarkLoRAStep(b *testing.B) {
	be, err := mx.Open("cpu")
	if err != nil {
		b.Fatal(err)
	}
	mx.SetDefault(be)
	const seq = 512
	for _, preset := range []struct {
		name string
		cfg  inference.Config
	}{{"SmolLM2-135M", inference.SmolLM2_135M()}, {"Qwen3-0.6B", inference.Qwen3_0_6B()}} {
		for _, bits := range []int{0, 16, 4} {
			name := fmt.Sprintf("%s/f32", preset.name)
			cfg := preset.cfg
			if bits == 16 { // a bfloat16 checkpoint's matrices, compact
				name = fmt.Sprintf("%s/bf16", preset.name)
			} else if bits > 0 {
				name = fmt.Sprintf("%s/q%d", preset.name, bits)
				cfg.Quantization = &inference.Quantization{QuantParams: inference.QuantParams{GroupSize: 64, Bits: bits}}
			}
			for _, ck := range []bool{false, true} {
				name := name
				if ck {
					name += "/ckpt"
				}
				b.Run(name, func(b *testing.B) {
					m := inference.NewRandom(cfg, 1, be)
					if bits == 16 {
						if err := m.CompactWeights(mx.BFloat16); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := Apply(m, Config{NumLayers: 16}); err != nil {
						b.Fatal(err)
					}
					params := Params(m)
					names := make([]string, 0, len(params))
					for n := range params {
						names = append(names, n)
					}
					slices.Sort(names)
					xs := make([]*mx.Array, len(names))
					for i, n := range names {
						xs[i] = params[n]
					}
					ids := make([]int, seq+1)
					for i := range ids {
						ids[i] = (i * 7919) % cfg.VocabSize
					}
					in, _ := m.Tokens(ids[:seq])
					tgt := mx.FromData(be, mx.Int32, toInt32(ids[1:]), 1, seq)
					mask := mx.Full(be, []int{1, seq}, 1, mx.Float32)
					loss := func(p []*mx.Array) []*mx.Array {
						set := map[string]*mx.Array{}
						for i, n := range names {
							set[n] = p[i]
						}
						if err := SetParams(m, set); err != nil {
							return []*mx.Array{mx.Errorf("%v", err)}
						}
						return []*mx.Array{m.Loss(in, tgt, mask, inference.LossOptions{CheckpointBlocks: ck})}
					}
					runtime.GC()
					mx.ResetPeakMemory(be)
					b.ResetTimer()
					start := time.Now()
					for i := 0; i < b.N; i++ {
						_, g, err := mx.ValueAndGrad(loss, xs)
						if err != nil || mx.Eval(g...) != nil {
							b.Fatal(err)
						}
					}
					sec := time.Since(start).Seconds() / float64(b.N)
					hid, inter, layers := cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers
					hd := cfg.HeadDim
					if hd == 0 {
						hd = hid / cfg.NumAttentionHeads
					}
					perLayer := hid*hd*(cfg.NumAttentionHeads*2+cfg.NumKeyValueHeads*2) + 3*hid*inter
					nw := float64(perLayer*layers + hid*cfg.VocabSize)
					attn := float64(layers) * 4 * float64(seq) * float64(seq) * float64(hd*cfg.NumAttentionHeads)
					flops := 2*(2*nw*seq) + 3*attn
					b.ReportMetric(seq/sec, "tok/s")
					b.ReportMetric(flops/sec/1e9, "GFLOP/s")
					if _, peak, ok := mx.Memory(be); ok {
						b.ReportMetric(float64(peak)/(1<<20), "peakMiB")
					}
				})
			}
		}
	}
}

func toInt32(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}
