// Package inference runs decoder-only language models: it loads Hugging Face and
// mlx-community checkpoints (dense or MLX-quantized), runs them forward with a KV cache,
// samples tokens and streams generation with timing statistics. It also quantizes a
// checkpoint into an mlx-lm compatible folder and measures perplexity.
//
// Everything numeric goes through mlxbridge, so the same model code runs on the cpu
// backend (CI, Linux) and on MLX (Apple silicon). Each architecture lives in its own
// file (llama.go, qwen2.go, qwen3.go) and registers itself by the model_type of
// config.json; the layers it is built from (Linear, Embedding, RMSNorm, SwiGLU, RoPE)
// are in layers.go. A layer's struct tags are its checkpoint names, so loading a
// checkpoint is a name match (weights.go).
//
// Weights are read-only once loaded; per-conversation state lives in a Cache (keys and
// values) held by a Session, which reuses the longest common prefix between chat turns.
// LoRA adapters sit beside the frozen weights as a versioned stack behind a read/write
// lock (adapter.go), so a background training step, a temporary test-time adapter and
// a running reply can share one model, and any recent state can be restored. A
// Replier (reply.go) turns a conversation into streamed text: chat template, stop
// tokens and stop strings, UTF-8-safe decoding.
package inference
