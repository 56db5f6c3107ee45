package inference

import (
	mx "github.com/inloop/inloop/mlxbridge"
)

// Qwen3 (dense): Llama's block with an RMSNorm over each query and key head before
// RoPE (q_norm and k_norm, weights of size head_dim), and no q/k/v biases.
//
//	q = rope(q_norm(q_proj(n)))   k = rope(k_norm(k_proj(n)))   v = v_proj(n)   n = rmsnorm(x)
//	h = x + o_proj(attention(q, k, v))
//	out = h + down_proj(silu(gate_proj(m)) · up_proj(m))                         m = rmsnorm(h)

func init() {
	Register("qwen3", Architecture{NewBlock: newQwen3Block})
}

type qwen3Block struct {
	InputNorm *RMSNorm       `tensor:"input_layernorm"`
	Attn      qwen3Attention `tensor:"self_attn"`
	PostNorm  *RMSNorm       `tensor:"post_attention_layernorm"`
	MLP       SwiGLU         `tensor:"mlp"`

	head blockHead
	tail blockTail
}

type qwen3Attention struct {
	Q     *Linear  `tensor:"q_proj"`
	K     *Linear  `tensor:"k_proj"`
	V     *Linear  `tensor:"v_proj"`
	O     *Linear  `tensor:"o_proj"`
	QNorm *RMSNorm `tensor:"q_norm"`
	KNorm *RMSNorm `tensor:"k_norm"`

	heads, kvHeads, headDim int
	scale                   float32
	rope                    Rope
}

func newQwen3Block(cfg *Config, _ int) Block {
	eps := float32(cfg.RMSNormEps)
	h, d := cfg.HiddenSize, cfg.Head()
	qd, kvd := cfg.NumAttentionHeads*d, cfg.NumKeyValueHeads*d
	return &qwen3Block{
		InputNorm: &RMSNorm{Dim: h, Eps: eps},
		Attn: qwen3Attention{
			Q:     &Linear{In: h, Out: qd, HasBias: cfg.AttentionBias},
			K:     &Linear{In: h, Out: kvd, HasBias: cfg.AttentionBias},
			V:     &Linear{In: h, Out: kvd, HasBias: cfg.AttentionBias},
			O:     &Linear{In: qd, Out: h, HasBias: cfg.AttentionBias},
			QNorm: &RMSNorm{Dim: d, Eps: eps},
			KNorm: &RMSNorm{Dim: d, Eps: eps},

			heads: cfg.NumAttentionHeads, kvHeads: cfg.NumKeyValueHeads, headDim: d,
			scale: attentionScale(d),
			rope:  newRope(cfg),
		},
		PostNorm: &RMSNorm{Dim: h, Eps: eps},
		MLP:      newSwiGLU(cfg),
	}
}

func (blk *qwen3Block) Forward(x *mx.Array, c *LayerCache) *mx.Array {
	a := &blk.Attn
	xn, q, k, v := blk.head.forward(x, headLayers{norm: blk.InputNorm, q: a.Q, k: a.K, v: a.V, qNorm: a.QNorm, kNorm: a.KNorm,
		heads: a.heads, kvHeads: a.kvHeads, dim: a.headDim}, c)
	o := attendHeads(xn, q, k, v, c, a.rope, a.scale)
	return blk.tail.forward(x, o, a.O, blk.PostNorm, &blk.MLP)
}
