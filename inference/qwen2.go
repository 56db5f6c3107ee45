package inference

// Qwen2 and Qwen2.5: Llama's block exactly, except that q_proj, k_proj and v_proj
// carry biases (o_proj and the MLP do not). config.json does not say so; the
// architecture does, so a checkpoint without them is refused by name.

func init() {
	Register("qwen2", Architecture{NewBlock: newQwen2Block})
}

func newQwen2Block(cfg *Config, i int) Block {
	blk := newLlamaBlock(cfg, i).(*llamaBlock)
	for _, l := range []*Linear{blk.Attn.Q, blk.Attn.K, blk.Attn.V} {
		l.HasBias = true
	}
	return blk
}
