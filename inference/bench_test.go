package inference

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Benchmarks on random-weight models with the real configurations of SmolLM2-135M
// and Qwen3-0.6B, dense float32 and MLX-quantized to 8 and 4 bits in groups of 64.
// Every benchmark also reports the machine's limits measured in the same process —
// sgemm 1024³ through mlxbridge and the read bandwidth of all cores — so the
// results read as ratios:
//
//	go test ./inference -run '^$' -bench . -benchtime 1x -timeout 60m
//
// The machine may be shared, so each benchmark reports the best of its b.N runs
// (other work can only slow a run down); use -benchtime 3x or more.
//
// Decode: tokens/s for 64 tokens after a 16-token prompt, against the roofline
// (weight bytes read per token ÷ read bandwidth). Prefill: 512 tokens/s and GFLOP/s
// against sgemm's. Context: ms per decoded token with 128 and 2048 cached positions.

var benchPresets = []struct {
	name string
	cfg  func() Config
}{
	{"smollm2-135m", SmolLM2_135M},
	{"qwen3-0.6b", Qwen3_0_6B},
}

// benchDType is a benchmark model's width: float32 (bits 0), bfloat16 (16), or
// quantized to 8 or 4 bits with float32 scales and biases (what quantizing a
// float32 model gives: 9.0 and 5.0 bits a weight) or, halfScales, bfloat16 ones
// (a bfloat16 checkpoint's, as mlx-lm writes it: 8.5 and 4.5, llama.cpp's Q8_0
// and Q4_0 widths).
type benchDType struct {
	name       string
	bits       int
	halfScales bool
}

var benchDTypes = []benchDType{{"f32", 0, false}, {"bf16", 16, false}, {"q8", 8, false}, {"q4", 4, false}, {"q8bf", 8, true}, {"q4bf", 4, true}}

// benchQuantized are benchDTypes' quantized widths.
var benchQuantized = benchDTypes[2:]

// benchModel builds (once) the model of a preset and width, dropping the previous
// one so that at most one big model is alive (Qwen3-0.6B in float32 is 3 GB).
var bench struct {
	sync.Mutex
	key string
	m   *Model
}

func benchModel(b *testing.B, preset string, cfg func() Config, dt benchDType) *Model {
	bench.Lock()
	defer bench.Unlock()
	key, bits := fmt.Sprint(preset, dt), dt.bits
	if bench.key != key {
		bench.m, bench.key = nil, ""
		runtime.GC()
		c := cfg()
		if bits > 0 && bits < 16 {
			c.Quantization = &Quantization{QuantParams: QuantParams{GroupSize: 64, Bits: bits}}
		}
		bench.m, bench.key = NewRandom(c, 1, cpu(b)), key
		if bits == 16 || dt.halfScales {
			if err := bench.m.CompactWeights(mx.BFloat16); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
	}
	return bench.m
}

// decodeBytes is what one decode step reads of the weights: every matrix once (the
// output projection included), one embedding row, the norms. On the cpu backend
// compact float16/bfloat16 scales are read at their width, and counted so.
func decodeBytes(m *Model) int64 {
	var n int64
	for name, a := range m.Params() {
		switch {
		case name == "model.embed_tokens.weight" || name == "model.embed_tokens.scales" || name == "model.embed_tokens.biases":
			if m.LMHead == nil { // tied: the whole table is the output projection
				n += a.Nbytes()
			} else {
				n += a.Nbytes() / int64(a.Dim(0))
			}
		default:
			n += a.Nbytes()
		}
	}
	return n
}

// matmulParams counts the multiply-adds per token of the layers' projections.
func matmulParams(cfg Config) int64 {
	h, f, d := int64(cfg.HiddenSize), int64(cfg.IntermediateSize), int64(cfg.Head())
	q, kv := int64(cfg.NumAttentionHeads)*d, int64(cfg.NumKeyValueHeads)*d
	perLayer := h*q + 2*h*kv + q*h + 3*h*f
	return perLayer * int64(cfg.NumHiddenLayers)
}

// machine holds this process's measured limits.
var machine = sync.OnceValue(func() (m struct{ sgemm, bandwidth float64 }) {
	be, _ := mx.Open("cpu")
	mx.SetDefault(be)
	x, y := mx.RandomNormal(1, 1024, 1024), mx.RandomNormal(2, 1024, 1024)
	mx.Eval(mx.Matmul(x, y))
	best := 0.0
	for range 5 {
		start := time.Now()
		for range 4 {
			mx.Eval(mx.Matmul(x, y))
		}
		best = max(best, 4*2*1024*1024*1024/time.Since(start).Seconds()/1e9)
	}
	m.sgemm = best
	m.bandwidth = readBandwidth()
	return m
})

// readBandwidth sums 512 MiB as uint64 words on every core, best of 5, in GB/s.
func readBandwidth() float64 {
	words := make([]uint64, 64<<20)
	for i := range words {
		words[i] = uint64(i)
	}
	workers := runtime.GOMAXPROCS(0)
	best := 0.0
	for range 5 {
		start := time.Now()
		var wg sync.WaitGroup
		sums := make([]uint64, workers*8) // spaced a cache line apart
		for w := range workers {
			part := words[len(words)*w/workers : len(words)*(w+1)/workers]
			wg.Go(func() { sums[w*8] = sumWords(part) })
		}
		wg.Wait()
		best = max(best, float64(8*len(words))/time.Since(start).Seconds()/1e9)
	}
	return best
}

func sumWords(a []uint64) uint64 {
	var s0, s1, s2, s3 uint64
	for len(a) >= 8 {
		s0 += a[0] + a[4]
		s1 += a[1] + a[5]
		s2 += a[2] + a[6]
		s3 += a[3] + a[7]
		a = a[8:]
	}
	for _, v := range a {
		s0 += v
	}
	return s0 + s1 + s2 + s3
}

func reportMachine(b *testing.B) {
	mc := machine()
	b.ReportMetric(mc.sgemm, "sgemm-GFLOP/s")
	b.ReportMetric(mc.bandwidth, "read-GB/s")
}

// decodeSteps decodes n greedy tokens after what s holds and returns the time per token.
func decodeSteps(b *testing.B, s *Session, logits *mx.Array, n int) time.Duration {
	start := time.Now()
	var row []float32
	for range n {
		var err error
		row, err = logits.Float32sInto(row)
		if err != nil {
			b.Fatal(err)
		}
		if logits, err = s.Append([]int{argmax(row)}); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start) / time.Duration(n)
}

// bestDecode is the best time per token, over b.N runs, of n greedy tokens decoded
// after a fresh session's 16-token prompt.
func bestDecode(b *testing.B, m *Model, n int) time.Duration {
	per := time.Duration(math.MaxInt64)
	for range b.N {
		per = min(per, decodeOnce(b, m, n))
	}
	return per
}

func BenchmarkDecode(b *testing.B) {
	for _, p := range benchPresets {
		for _, dt := range benchDTypes {
			b.Run(p.name+"/"+dt.name, func(b *testing.B) {
				m := benchModel(b, p.name, p.cfg, dt)
				machine()
				b.ResetTimer()
				per := bestDecode(b, m, 64)
				bytes := decodeBytes(m)
				tps := 1 / per.Seconds()
				roof := machine().bandwidth * 1e9 / float64(bytes)
				reportMachine(b)
				b.ReportMetric(tps, "tok/s")
				b.ReportMetric(float64(bytes)/1e6, "weight-MB/tok")
				b.ReportMetric(roof, "roofline-tok/s")
				b.ReportMetric(tps/roof, "of-roofline")
			})
		}
	}
}

// BenchmarkDecodeInt8 is BenchmarkDecode for the quantized models, exact
// (SetInt8Decode off) and on 8-bit activations, one after the other on the same
// model, so their ratio comes from one run.
func BenchmarkDecodeInt8(b *testing.B) {
	eachInt8(b, (*Model).SetInt8Decode, func(b *testing.B, m *Model) {
		b.ResetTimer()
		per := bestDecode(b, m, 64)
		b.ReportMetric(1/per.Seconds(), "tok/s")
	})
}

// eachInt8 runs f on each preset's quantized models, exact and with set on (an
// 8-bit-activation choice), set off again after.
func eachInt8(b *testing.B, set func(m *Model, on bool), f func(b *testing.B, m *Model)) {
	for _, p := range benchPresets {
		for _, dt := range benchQuantized {
			for _, int8 := range []bool{false, true} {
				name := map[bool]string{false: "exact", true: "int8"}[int8]
				b.Run(fmt.Sprintf("%s/%s/%s", p.name, dt.name, name), func(b *testing.B) {
					m := benchModel(b, p.name, p.cfg, dt)
					set(m, int8)
					defer set(m, false)
					f(b, m)
				})
			}
		}
	}
}

// BenchmarkDecodeAdapted is what an adapter costs while decoding: the 4-bit
// models with and without a rank-8 LoRA on every linear layer of every block
// (a fine-tune's adapter, or the chat's corrections), alternating on the same
// model in one run, best of b.N each.
func BenchmarkDecodeAdapted(b *testing.B) {
	for _, p := range benchPresets {
		b.Run(p.name+"/q4", func(b *testing.B) {
			m := benchModel(b, p.name, p.cfg, benchDType{"q4", 4, false})
			loras := map[string]LoRA{}
			var i uint64
			m.Linears(func(path string, l *Linear) {
				if strings.HasPrefix(path, "model.layers.") {
					i++
					a := mx.MulScalar(mx.RandomNormal(2*i, l.In, 8), 0.01)
					loras[path] = LoRA{A: a, B: mx.MulScalar(mx.RandomNormal(2*i+1, 8, l.Out), 0.01), Scale: 20}
				}
			})
			ad := NewAdapter("bench", loras)
			plain, adapted := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
			b.ResetTimer()
			for range b.N {
				plain = min(plain, decodeOnce(b, m, 64))
				if _, err := m.PushAdapter(ad); err != nil {
					b.Fatal(err)
				}
				adapted = min(adapted, decodeOnce(b, m, 64))
				if _, _, err := m.PopAdapter(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(1/plain.Seconds(), "plain-tok/s")
			b.ReportMetric(1/adapted.Seconds(), "adapted-tok/s")
			b.ReportMetric(plain.Seconds()/adapted.Seconds(), "adapted/plain")
		})
	}
}

// decodeOnce is the time per token of n greedy tokens after a fresh
// session's 16-token prompt.
func decodeOnce(b *testing.B, m *Model, n int) time.Duration {
	s := NewSession(m)
	logits, _, err := s.Prefill(tokenSeq(16, m.cfg.VocabSize, 1))
	if err != nil {
		b.Fatal(err)
	}
	return decodeSteps(b, s, logits, n)
}

func BenchmarkPrefill512(b *testing.B) {
	for _, p := range benchPresets {
		for _, dt := range benchDTypes {
			b.Run(p.name+"/"+dt.name, func(b *testing.B) { prefill512(b, benchModel(b, p.name, p.cfg, dt)) })
		}
	}
}

// BenchmarkPrefill512Int8 is BenchmarkPrefill512 for the quantized widths, exact
// and with SetInt8Prefill (8-bit activations, integer products).
func BenchmarkPrefill512Int8(b *testing.B) { eachInt8(b, (*Model).SetInt8Prefill, prefill512) }

// BenchmarkPrefill512BF16 is BenchmarkPrefill512 for the bfloat16 width, exact and with
// SetBF16Prefill (bfloat16 activations, products in bfloat16 pairs).
func BenchmarkPrefill512BF16(b *testing.B) {
	for _, p := range benchPresets {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/bf16/%s", p.name, map[bool]string{false: "exact", true: "bf16"}[on]), func(b *testing.B) {
				m := benchModel(b, p.name, p.cfg, benchDTypes[1])
				m.SetBF16Prefill(on)
				defer m.SetBF16Prefill(false)
				prefill512(b, m)
			})
		}
	}
}

// prefill512 reports m's prefill of 512 tokens, best of b.N: tokens and model
// GFLOP a second, and the fraction of this machine's sgemm peak.
func prefill512(b *testing.B, m *Model) {
	machine()
	prompt := tokenSeq(512, m.cfg.VocabSize, 2)
	sec := math.Inf(1)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, _, err := NewSession(m).Prefill(prompt); err != nil {
			b.Fatal(err)
		}
		sec = min(sec, time.Since(start).Seconds())
	}
	cfg := m.cfg
	const l = 512
	attn := 2 * int64(cfg.NumAttentionHeads*cfg.Head()) * l * (l + 1) * int64(cfg.NumHiddenLayers) // causal q·kᵀ and p·v
	flops := 2*matmulParams(cfg)*l + attn + 2*int64(cfg.VocabSize*cfg.HiddenSize)
	gf := float64(flops) / sec / 1e9
	reportMachine(b)
	b.ReportMetric(l/sec, "tok/s")
	b.ReportMetric(gf, "GFLOP/s")
	b.ReportMetric(gf/machine().sgemm, "of-sgemm")
}

// fillCache gives every layer n random cached positions, as one frozen part.
func fillCache(m *Model, c *Cache, n int) {
	cfg := m.cfg
	shape := []int{1, cfg.NumKeyValueHeads, n, cfg.Head()}
	for i := range c.layers {
		k := mx.FromData(m.b, mx.Float32, uniform(uint64(2*i), numel(shape), 0, 1), shape...)
		v := mx.FromData(m.b, mx.Float32, uniform(uint64(2*i+1), numel(shape), 0, 1), shape...)
		if c.opts.Bits == 16 {
			c.layers[i] = LayerCache{k: half(k), v: half(v), opts: c.opts}
			continue
		}
		if c.opts.Bits > 0 {
			c.layers[i] = LayerCache{opts: c.opts}
			if err := c.layers[i].freeze(k, v); err != nil {
				panic(err)
			}
			continue
		}
		c.layers[i] = LayerCache{k: k, v: v}
	}
}

// BenchmarkDecodeContext is decoding after ctx cached positions, with the KV cache
// exact, in bfloat16 (kv16) and quantized to 8 and 4 bits (kv8, kv4).
func BenchmarkDecodeContext(b *testing.B) {
	for _, p := range benchPresets {
		for _, dt := range benchDTypes {
			for _, ctx := range []int{128, 2048} {
				for _, kv := range []int{0, 16, 8, 4} {
					name := fmt.Sprintf("%s/%s/ctx%d", p.name, dt.name, ctx)
					if kv > 0 {
						name += fmt.Sprintf("/kv%d", kv)
					}
					b.Run(name, func(b *testing.B) {
						m := benchModel(b, p.name, p.cfg, dt)
						s, err := NewSessionWith(m, CacheOptions{Bits: kv})
						if err != nil {
							b.Fatal(err)
						}
						fillCache(m, s.cache, ctx)
						s.tokens = tokenSeq(ctx, m.cfg.VocabSize, 3)
						logits, err := s.Append([]int{1})
						if err != nil {
							b.Fatal(err)
						}
						per := time.Duration(math.MaxInt64)
						b.ResetTimer()
						for range b.N {
							per = min(per, decodeSteps(b, s, logits, 64))
							s.cache.Trim(ctx + 1)
							s.tokens = s.tokens[:ctx+1]
						}
						b.ReportMetric(float64(per.Microseconds())/1e3, "ms/tok")
						b.ReportMetric(1/per.Seconds(), "tok/s")
						b.ReportMetric(float64(s.cache.Bytes())/1e6, "kv-MB")
					})
				}
			}
		}
	}
}

// BenchmarkDecodeProfile is one model's decode loop alone, for pprof:
//
//	go test ./inference -run '^$' -bench DecodeProfile -benchtime 200x -cpuprofile cpu.out
func BenchmarkDecodeProfile(b *testing.B) {
	for _, p := range benchPresets {
		for _, dt := range benchDTypes {
			b.Run(p.name+"/"+dt.name, func(b *testing.B) {
				m := benchModel(b, p.name, p.cfg, dt)
				s := NewSession(m)
				logits, _, _ := s.Prefill(tokenSeq(16, m.cfg.VocabSize, 1))
				b.ResetTimer()
				for i := range b.N {
					if i%256 == 255 {
						s.cache.Trim(17)
						s.tokens = s.tokens[:17]
					}
					decodeSteps(b, s, logits, 1)
				}
			})
		}
	}
}

// BenchmarkDecodeMLX is BenchmarkDecode's loop on the mlx backend (skipped where
// libmlxc does not load), for SmolLM2-135M's shape in float32 and 4-bit: what the
// per-op cost of the backend does to a decoding step.
func BenchmarkDecodeMLX(b *testing.B) {
	be, err := mx.Open("mlx")
	if err != nil {
		b.Skipf("mlx backend: %v", err)
	}
	for _, bits := range []int{0, 4} {
		b.Run(fmt.Sprintf("smollm2-135m/bits=%d", bits), func(b *testing.B) {
			c := SmolLM2_135M()
			if bits > 0 {
				c.Quantization = &Quantization{QuantParams: QuantParams{GroupSize: 64, Bits: bits}}
			}
			m := NewRandom(c, 1, be)
			b.ResetTimer()
			b.ReportMetric(1/bestDecode(b, m, 32).Seconds(), "tok/s")
		})
	}
}

// BenchmarkGenerateMLX is Generate on the mlx backend (skipped where libmlxc
// does not load): 64 tokens after a 16-token prompt, greedy and sampled
// (temperature 0.7, top-p 0.95), with each step queued before the token it
// follows is read back (queued, the default there) and without (plain), on
// the bundled demo model, its 4-bit copy and SmolLM2-135M's shape in float32
// and 4-bit. A quantized model's queued steps go block by block on the CPU
// device (stagesSteps); whole is the same loop with each step queued whole.
// tok/s is the best decode rate of b.N runs:
//
//	MLXC_LIB=… go test ./inference -run '^$' -bench GenerateMLX -benchtime 5x
func BenchmarkGenerateMLX(b *testing.B) {
	demo, be := mlxDemo(b)
	dir := filepath.Join(b.TempDir(), "demo-4bit")
	if _, err := QuantizeModel("../resources/demo", dir, 4, 64); err != nil {
		b.Fatal(err)
	}
	demo4, err := Load(dir, be)
	if err != nil {
		b.Fatal(err)
	}
	smol4 := SmolLM2_135M()
	smol4.Quantization = &Quantization{QuantParams: QuantParams{GroupSize: 64, Bits: 4}}
	models := []struct {
		name string
		m    *Model
	}{{"demo", demo}, {"demo-4bit", demo4}, {"smollm2-135m", NewRandom(SmolLM2_135M(), 1, be)}, {"smollm2-135m-4bit", NewRandom(smol4, 1, be)}}
	for _, mc := range models {
		for _, so := range []struct {
			name string
			o    SampleOptions
		}{{"greedy", SampleOptions{}}, {"top-p", SampleOptions{Temperature: 0.7, TopP: 0.95, Seed: 1}}} {
			for _, mode := range []struct {
				name         string
				queue, stage int
			}{{"queued", 1, 0}, {"whole", 1, -1}, {"plain", -1, 0}} {
				if mode.name == "whole" && mc.m.cfg.Quantization == nil {
					continue
				}
				b.Run(mc.name+"/"+so.name+"/"+mode.name, func(b *testing.B) {
					queueMode, stageMode = mode.queue, mode.stage
					defer func() { queueMode, stageMode = 0, 0 }()
					prompt := tokenSeq(16, mc.m.cfg.VocabSize, 1)
					best := 0.0
					for range b.N {
						st, err := Generate(context.Background(), NewSession(mc.m), prompt, GenerateOptions{MaxTokens: 65, Sampling: so.o}, func(int) bool { return false })
						if err != nil || st.GeneratedTokens != 65 {
							b.Fatalf("%v, %d tokens", err, st.GeneratedTokens)
						}
						best = max(best, st.DecodeTPS)
					}
					b.ReportMetric(best, "tok/s")
				})
			}
		}
	}
}

// BenchmarkDecodeGraphMLX is what building one decode step costs the host on the
// mlx backend, without computing it: the forward pass of one token after 16 and the
// greedy draw on the device, as generateQueued issues them (skipped where libmlxc
// does not load), with each block's head and tail compiled (compiled) and as ops
// (ops). On a GPU the step computes while the host builds the next one, so for
// small models this is what bounds decoding; us/step is per step. Each step is
// then computed and the cache cut back, outside the timing.
func BenchmarkDecodeGraphMLX(b *testing.B) {
	m, be := mlxDemo(b)
	s := NewSession(m)
	if _, _, err := s.Prefill(tokenSeq(16, m.cfg.VocabSize, 1)); err != nil {
		b.Fatal(err)
	}
	sampler, err := NewSampler(SampleOptions{})
	if err != nil {
		b.Fatal(err)
	}
	tok := mx.FromData(be, mx.Int32, []int32{5}, 1, 1)
	for _, compiled := range []bool{true, false} {
		name := map[bool]string{true: "compiled", false: "ops"}[compiled]
		b.Run(name, func(b *testing.B) {
			compileBlocks = compiled
			defer func() { compileBlocks = true }()
			var build time.Duration
			for b.Loop() {
				var next *mx.Array
				start := time.Now()
				mx.Run(be, func() {
					logits := m.ForwardLast(tok, s.cache)
					next, _ = sampler.deviceDraw(mx.Reshape(logits, m.cfg.VocabSize), false)
				})
				build += time.Since(start)
				if err := mx.Eval(next); err != nil {
					b.Fatal(err)
				}
				s.cache.Trim(16)
			}
			b.ReportMetric(build.Seconds()*1e6/float64(b.N), "us/step")
		})
	}
}

// BenchmarkPrefillMLX is a 500-token prefill of the bundled demo model on the
// mlx backend (skipped where libmlxc does not load), best of b.N: to compare
// with mlx-lm's model(prompt, cache) and eval on the same MLX build.
func BenchmarkPrefillMLX(b *testing.B) {
	m, _ := mlxDemo(b)
	b.ReportMetric(500/bestPrefill(b, m, tokenSeq(500, m.cfg.VocabSize, 1)).Seconds(), "tok/s")
}

// mlxDemo is the bundled demo model on the mlx backend; it skips b where
// libmlxc does not load.
func mlxDemo(b *testing.B) (*Model, mx.Backend) {
	be, err := mx.Open("mlx")
	if err != nil {
		b.Skipf("mlx backend: %v", err)
	}
	m, err := Load("../resources/demo", be)
	if err != nil {
		b.Fatal(err)
	}
	return m, be
}

// BenchmarkSeedFrom is what a chat turn with test-time training costs before
// its reply: the adapted fork's session holding a conversation of ctx tokens,
// of which the chat's own session held all but the last 100, on a
// random-weight model with Qwen3-0.6B's config at 4 bits, the temporary
// adapter on its last 4 blocks. "prefill": the fork's session computes
// everything (every block over the whole conversation); "seeded": the chat's
// session computes its 100 new tokens and the fork's starts from its kept
// hidden states (SeedFrom), then prefills the last token.
//
//	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE go test ./inference -run '^$' -bench SeedFrom -benchtime 2x -timeout 30m
func BenchmarkSeedFrom(b *testing.B) {
	be, err := mx.Open("cpu")
	if err != nil {
		b.Fatal(err)
	}
	c := Qwen3_0_6B()
	c.Quantization = &Quantization{QuantParams: QuantParams{GroupSize: 64, Bits: 4}}
	m := NewRandom(c, 1, be)
	k := m.Blocks() - 4
	fork := m.Fork()
	loras := map[string]LoRA{}
	m.Linears(func(path string, l *Linear) {
		var i int
		if _, err := fmt.Sscanf(path, "model.layers.%d.", &i); err == nil && i >= k {
			loras[path] = LoRA{A: mx.Full(be, []int{l.In, 8}, 0.01, mx.Float32), B: mx.Full(be, []int{8, l.Out}, 0.01, mx.Float32), Scale: 1}
		}
	})
	if _, err := fork.PushAdapter(NewAdapter("ttt", loras)); err != nil {
		b.Fatal(err)
	}
	for _, ctx := range []int{1000, 2000} {
		ids := tokenSeq(ctx, c.VocabSize, 3)
		b.Run(fmt.Sprintf("ctx=%d/prefill", ctx), func(b *testing.B) {
			b.ReportMetric(bestPrefill(b, fork, ids).Seconds()*1e3, "ms")
		})
		b.Run(fmt.Sprintf("ctx=%d/seeded", ctx), func(b *testing.B) {
			best := time.Duration(math.MaxInt64)
			for range b.N {
				own := NewSession(m)
				if err := own.Cache().KeepHidden(k); err != nil {
					b.Fatal(err)
				}
				if _, _, err := own.Prefill(ids[:ctx-100]); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if _, _, err := own.Prefill(ids[:ctx-1]); err != nil {
					b.Fatal(err)
				}
				s := NewSession(fork)
				if _, err := s.SeedFrom(own, k); err != nil {
					b.Fatal(err)
				}
				if _, _, err := s.Prefill(ids); err != nil {
					b.Fatal(err)
				}
				best = min(best, time.Since(start))
			}
			b.ReportMetric(best.Seconds()*1e3, "ms")
		})
	}
}

// bestPrefill is the best time, over b.N runs, of a fresh session's prefill of ids.
func bestPrefill(b *testing.B, m *Model, ids []int) time.Duration {
	best := time.Duration(math.MaxInt64)
	for range b.N {
		start := time.Now()
		if _, _, err := NewSession(m).Prefill(ids); err != nil {
			b.Fatal(err)
		}
		best = min(best, time.Since(start))
	}
	return best
}

// BenchmarkLoadBF16 loads a bfloat16 checkpoint of Qwen3-0.6B's shape (random weights,
// written once to a temporary folder) as float32 with its matrices compact (the
// default) and widened (LoadOptions.WidenWeights): the time, and the cpu backend's
// memory held after and at its peak during the load.
func BenchmarkLoadBF16(b *testing.B) {
	be := cpu(b)
	dir := b.TempDir()
	m := NewRandom(Qwen3_0_6B(), 1, be)
	if err := m.CastFloats(mx.BFloat16); err != nil {
		b.Fatal(err)
	}
	if err := SaveModel(m, dir); err != nil {
		b.Fatal(err)
	}
	m = nil
	for _, o := range []LoadOptions{{}, {WidenWeights: true}} {
		name := "compact"
		if o.WidenWeights {
			name = "widened"
		}
		b.Run(name, func(b *testing.B) {
			var active, peak int64
			for range b.N {
				runtime.GC()
				runtime.GC()
				mx.ResetPeakMemory(be)
				m, err := LoadWithOptions(dir, be, o)
				if err != nil {
					b.Fatal(err)
				}
				_, peak, _ = mx.Memory(be)
				runtime.GC()
				active, _, _ = mx.Memory(be)
				runtime.KeepAlive(m)
			}
			b.ReportMetric(float64(active)/(1<<20), "heldMiB")
			b.ReportMetric(float64(peak)/(1<<20), "peakMiB")
		})
	}
}
