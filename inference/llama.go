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
	o := blk.Attn.attend(blk.InputNorm.Forward(x), c)
	return blk.tail.forward(x, o, blk.Attn.O, blk.PostNorm, &blk.MLP)
}

// attend is attention over x (B, L, hidden) at the positions after c's: the heads'
// outputs merged, (B, L, Hq·D), which the output projection (in the block's tail)
// takes.
func (a *llamaAttention) attend(x *mx.Array, c *LayerCache) *mx.Array {
	b, l := x.Dim(0), x.Dim(1)
	qkv := forwardAll(x, a.Q, a.K, a.V)
	q := splitHeads(qkv[0], b, l, a.heads, a.headDim)   // (B, Hq, L, D)
	k := splitHeads(qkv[1], b, l, a.kvHeads, a.headDim) // (B, Hkv, L, D)
	v := splitHeads(qkv[2], b, l, a.kvHeads, a.headDim) // (B, Hkv, L, D)
	pos := c.Len()
	q, k = a.rope.Apply(q, pos), a.rope.Apply(k, pos)
	o := c.Attend(x, q, k, v, a.scale) // (B, Hq, L, D)
	return mergeHeads(o, b, l, a.heads, a.headDim)
}
