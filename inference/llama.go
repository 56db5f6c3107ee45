package inference

import (
	mx "github.com/inloop/inloop/mlxbridge"
)

// Llama (Llama 2/3.x, SmolLM/SmolLM2, Mistral): pre-norm residual blocks of
// grouped-query attention with rotary positions and a SwiGLU feed-forward.
//
//	h   = x + o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))   n = rmsnorm(x)
//	out = h + down_proj(silu(gate_proj(m)) · up_proj(m))                        m = rmsnorm(h)
//
// Mistral's sliding window is not applied: it changes nothing below its length
// (4096 for Mistral 7B v0.1).

func init() {
	Register("llama", Architecture{NewBlock: newLlamaBlock})
	Register("mistral", Architecture{NewBlock: newLlamaBlock})
}

type llamaBlock struct {
	InputNorm *RMSNorm       `tensor:"input_layernorm"`
	Attn      llamaAttention `tensor:"self_attn"`
	PostNorm  *RMSNorm       `tensor:"post_attention_layernorm"`
	MLP       SwiGLU         `tensor:"mlp"`

	head blockHead
	tail blockTail
}

type llamaAttention struct {
	Q *Linear `tensor:"q_proj"`
	K *Linear `tensor:"k_proj"`
	V *Linear `tensor:"v_proj"`
	O *Linear `tensor:"o_proj"`

	heads, kvHeads, headDim int
	scale                   float32
	rope                    Rope
}

func newLlamaAttention(cfg *Config) llamaAttention {
	h, d := cfg.HiddenSize, cfg.Head()
	qd, kvd := cfg.NumAttentionHeads*d, cfg.NumKeyValueHeads*d
	return llamaAttention{
		Q: &Linear{In: h, Out: qd, HasBias: cfg.AttentionBias},
		K: &Linear{In: h, Out: kvd, HasBias: cfg.AttentionBias},
		V: &Linear{In: h, Out: kvd, HasBias: cfg.AttentionBias},
		O: &Linear{In: qd, Out: h, HasBias: cfg.AttentionBias},

		heads: cfg.NumAttentionHeads, kvHeads: cfg.NumKeyValueHeads, headDim: d,
		scale: attentionScale(d),
		rope:  newRope(cfg),
	}
}

func newLlamaBlock(cfg *Config, _ int) Block {
	eps := float32(cfg.RMSNormEps)
	mlp := newSwiGLU(cfg)
	for _, l := range []*Linear{mlp.Gate, mlp.Up, mlp.Down} {
		l.HasBias = cfg.MLPBias
	}
	return &llamaBlock{
		InputNorm: &RMSNorm{Dim: cfg.HiddenSize, Eps: eps},
		Attn:      newLlamaAttention(cfg),
		PostNorm:  &RMSNorm{Dim: cfg.HiddenSize, Eps: eps},
		MLP:       mlp,
	}
}

func (blk *llamaBlock) Forward(x *mx.Array, c *LayerCache) *mx.Array {
	a := &blk.Attn
	xn, q, k, v := blk.head.forward(x, headLayers{norm: blk.InputNorm, q: a.Q, k: a.K, v: a.V,
		heads: a.heads, kvHeads: a.kvHeads, dim: a.headDim}, c)
	o := attendHeads(xn, q, k, v, c, a.rope, a.scale)
	return blk.tail.forward(x, o, a.O, blk.PostNorm, &blk.MLP)
}

// attendHeads rotates the queries q (B, Hq, L, D) and keys k (B, Hkv, L, D) to
// their positions after c's and attends over c and them: the heads' outputs
// merged, (B, L, Hq·D), for the output projection. xn is the block's normalized
// input, for c's attention hook.
func attendHeads(xn, q, k, v *mx.Array, c *LayerCache, rope Rope, scale float32) *mx.Array {
	b, l, h, d := q.Dim(0), q.Dim(2), q.Dim(1), q.Dim(3)
	pos := c.Len()
	q, k = rope.Apply(q, pos), rope.Apply(k, pos)
	o := c.Attend(xn, q, k, v, scale) // (B, Hq, L, D)
	return mergeHeads(o, b, l, h, d)
}
