package inference

import (
	mx "github.com/inloop/inloop/mlxbridge"
)

// The building blocks every architecture here shares. Each module knows the shape its
// checkpoint tensors must have (In, Out, Dim...), which the loader checks and
// NewRandom fills; the tensors themselves are bound by name (weights.go).

// Linear is y = x·Wᵀ + b. W is dense (Out, In), or MLX-quantized: packed uint32
// words (Out, In·Bits/32) with Scales and Biases (Out, In/GroupSize).
type Linear struct {
	In, Out int
	HasBias bool // the architecture requires a bias (qwen2's q/k/v); others load one if present

	Weight *mx.Array
	Bias   *mx.Array // (Out) or nil
	Scales *mx.Array // quantized only
	Biases *mx.Array // quantized only: the affine offsets, not the layer's bias

	GroupSize, Bits int

	act *actChoice // products on rounded activations: the model's choices (SetInt8Decode, SetInt8Prefill, SetBF16Prefill)

	// adapters are the updates of the model's adapter stack for this layer, bottom
	// first (adapter.go); the model rewrites the list under its write lock.
	adapters []*LoRA
}

func (l *Linear) quantized() bool { return l.Scales != nil }

// Forward maps x (..., In) to (..., Out).
func (l *Linear) Forward(x *mx.Array) *mx.Array {
	var y *mx.Array
	if l.quantized() && l.act.takes(x) {
		y = mx.QuantizedMatmulA8(x, l.Weight, l.Scales, l.Biases, l.GroupSize, l.Bits)
	} else if l.quantized() {
		y = mx.QuantizedMatmul(x, l.Weight, l.Scales, l.Biases, true, l.GroupSize, l.Bits)
	} else if l.act.takesBF16(x) {
		y = mx.MatmulTBF16(x, l.Weight)
	} else {
		y = mx.MatmulT(x, l.Weight, false, true)
	}
	return l.finish(y, x)
}

// finish adds the bias and the adapters' updates to y = x·Wᵀ.
func (l *Linear) finish(y, x *mx.Array) *mx.Array {
	if l.Bias != nil {
		y = mx.Add(y, l.Bias)
	}
	for _, lo := range l.adapters {
		y = lo.AddTo(y, x)
	}
	return y
}

// forwardAll is each layer's Forward of the same x: a block's query, key and value
// projections, or its gate and up projections. Quantized layers of one format
// multiply x in one op (mx.QuantizedMatmuls), which a decoding step hands to the
// cores once instead of once a layer; the results are each layer's own.
func forwardAll(x *mx.Array, ls ...*Linear) []*mx.Array {
	ys := make([]*mx.Array, len(ls))
	l0 := ls[0]
	for _, l := range ls {
		if !l.quantized() || l.GroupSize != l0.GroupSize || l.Bits != l0.Bits || l.In != l0.In {
			for i, l := range ls {
				ys[i] = l.Forward(x)
			}
			return ys
		}
	}
	ws := make([]mx.QuantizedMatrix, len(ls))
	for i, l := range ls {
		ws[i] = mx.QuantizedMatrix{W: l.Weight, Scales: l.Scales, Biases: l.Biases}
	}
	for i, y := range mx.QuantizedMatmuls(x, ws, l0.GroupSize, l0.Bits, l0.act.takes(x)) {
		ys[i] = ls[i].finish(y, x)
	}
	return ys
}

// Embedding maps token ids to rows of Weight (Vocab, Dim), dense or quantized.
type Embedding struct {
	Vocab, Dim int

	Weight         *mx.Array
	Scales, Biases *mx.Array
	GroupSize      int
	Bits           int
	dtype          mx.DType   // of the activations it produces
	act            *actChoice // AsLinear's products on rounded activations: the model's choices
}

func (e *Embedding) quantized() bool { return e.Scales != nil }

// Forward looks up ids (B, L) Int32 and returns (B, L, Dim). A quantized table is
// gathered packed, then only the gathered rows are dequantized.
func (e *Embedding) Forward(ids *mx.Array) *mx.Array {
	if !e.quantized() {
		return mx.AsType(mx.Take(e.Weight, ids, 0), e.dtype)
	}
	rows := mx.Take(e.Weight, ids, 0)
	s, b := e.rowScales(ids)
	return mx.AsType(mx.Dequantize(rows, s, b, e.GroupSize, e.Bits), e.dtype)
}

// rowScales gathers the scales and biases of rows ids in the activations' dtype:
// a float32 load keeps a 16-bit checkpoint's scales compact, but its rows
// dequantize in float32 (as the checkpoint cast to float32 would, which mlx-lm's
// --dtype float32 gives), not rounded to 16 bits.
func (e *Embedding) rowScales(ids *mx.Array) (s, b *mx.Array) {
	return mx.AsType(mx.Take(e.Scales, ids, 0), e.dtype), mx.AsType(mx.Take(e.Biases, ids, 0), e.dtype)
}

// AsLinear uses the table as the output projection of tied models: x (..., Dim)
// to logits (..., Vocab).
func (e *Embedding) AsLinear(x *mx.Array) *mx.Array {
	if e.quantized() && e.act.takes(x) {
		return mx.QuantizedMatmulA8(x, e.Weight, e.Scales, e.Biases, e.GroupSize, e.Bits)
	}
	if e.quantized() {
		return mx.QuantizedMatmul(x, e.Weight, e.Scales, e.Biases, true, e.GroupSize, e.Bits)
	}
	if e.act.takesBF16(x) {
		return mx.MatmulTBF16(x, e.Weight)
	}
	return mx.MatmulT(x, e.Weight, false, true)
}

// RMSNorm is x·rsqrt(mean(x²)+eps)·Weight over the last axis.
type RMSNorm struct {
	Dim    int
	Eps    float32
	Weight *mx.Array // (Dim)
}

func (n *RMSNorm) Forward(x *mx.Array) *mx.Array { return mx.RMSNorm(x, n.Weight, n.Eps) }

// SwiGLU is the feed-forward block: down(silu(gate(x)) · up(x)).
type SwiGLU struct {
	Gate *Linear `tensor:"gate_proj"`
	Up   *Linear `tensor:"up_proj"`
	Down *Linear `tensor:"down_proj"`
}

func newSwiGLU(cfg *Config) SwiGLU {
	h, f := cfg.HiddenSize, cfg.IntermediateSize
	return SwiGLU{
		Gate: &Linear{In: h, Out: f},
		Up:   &Linear{In: h, Out: f},
		Down: &Linear{In: f, Out: h},
	}
}

func (m *SwiGLU) Forward(x *mx.Array) *mx.Array {
	gu := forwardAll(x, m.Gate, m.Up)
	return m.Down.Forward(mx.Mul(mx.Silu(gu[0]), gu[1]))
}

// Rope is rotary position embedding in Hugging Face's rotate-half layout, on the
// backend's fused kernel; llama3's per-frequency scaling hands it its periods.
type Rope struct {
	dims   int
	base   float32
	scale  float32
	llama3 *llama3Freqs // non-nil: llama3 rope_scaling's periods (rope.go)
}

func newRope(cfg *Config) Rope {
	r := Rope{dims: cfg.Head(), base: float32(cfg.RopeTheta), scale: 1}
	if s := cfg.RopeScaling; s != nil {
		switch s.Type {
		case "linear":
			r.scale = float32(1 / s.Factor)
		case "llama3":
			r.llama3 = newLlama3Freqs(cfg)
		}
	}
	return r
}

// Apply rotates x (B, H, L, D) whose rows sit at positions offset, offset+1, ...
func (r *Rope) Apply(x *mx.Array, offset int) *mx.Array {
	o := mx.RoPEOptions{Dims: r.dims, Base: r.base, Scale: r.scale, Offset: offset}
	if r.llama3 != nil {
		o.Base, o.Freqs = 0, r.llama3.on(x.Backend())
	}
	return mx.RoPE(x, o)
}

// splitHeads turns (B, L, H·D) into (B, H, L, D). A single position needs no
// transpose: (B, 1, H, D) and (B, H, 1, D) lay out the same bytes.
func splitHeads(x *mx.Array, b, l, h, d int) *mx.Array {
	if l == 1 { // (B, 1, H·D) is (B, H, 1, D) in memory: one reshape
		return mx.Reshape(x, b, h, 1, d)
	}
	return mx.Transpose(mx.Reshape(x, b, l, h, d), 0, 2, 1, 3)
}

// mergeHeads is splitHeads' inverse: (B, H, L, D) to (B, L, H·D).
func mergeHeads(x *mx.Array, b, l, h, d int) *mx.Array {
	if l != 1 {
		x = mx.Transpose(x, 0, 2, 1, 3)
	}
	return mx.Reshape(x, b, l, h*d)
}
