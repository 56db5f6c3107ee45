package app

import (
	"fmt"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/store"
	"github.com/inloop/inloop/training/trainer"
)

// Fit says whether a model fits this machine's memory, for chat and for LoRA
// training with the default batch (4 × 512 tokens).
type Fit struct {
	Chat, LoRA           bool
	ChatBytes, LoRABytes int64 // what each is estimated to hold
	Available            int64 // memory the system reports available; 0 when unknown (then both fit)
}

func (f Fit) String() string {
	mark := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	return fmt.Sprintf("chat: %s (%s), LoRA: %s (%s)", mark(f.Chat), FormatBytes(f.ChatBytes), mark(f.LoRA), FormatBytes(f.LoRABytes))
}

// FitOf estimates what a registered model needs, trained on backend b.
func FitOf(b mx.Backend, m store.Model) Fit {
	cfg, err := inference.ReadConfig(m.Path)
	if err != nil {
		return Fit{}
	}
	e := EstimateTrain(b, cfg, m.Bytes, 4, 512, 8, -1)
	// Chat: the weights, a full context's KV cache and working buffers.
	kv := kvBytesPerToken(cfg) * int64(max(cfg.MaxPositionEmbeddings, 2048))
	f := Fit{ChatBytes: weightsInMemory(m) + kv + 64<<20, LoRABytes: e.Total(), Available: e.Available}
	f.Chat = f.Available == 0 || f.ChatBytes <= f.Available
	f.LoRA = f.Available == 0 || f.LoRABytes <= f.Available
	return f
}

// kvBytesPerToken is what one token holds in the KV cache: a float32 key and
// value per layer and key-value head.
func kvBytesPerToken(cfg inference.Config) int64 {
	return int64(2 * cfg.NumHiddenLayers * cfg.NumKeyValueHeads * cfg.Head() * 4)
}

// weightsInMemory is what the weights take once loaded: dense weights as float32
// on the cpu backend, quantized ones as stored.
func weightsInMemory(m store.Model) int64 {
	if m.Bits > 0 {
		return m.Bytes
	}
	return m.Params * 4
}

// EstimateTrain is the trainer's memory estimate for a LoRA run of rank on the
// last layers blocks (-1: all) with batch rows of seq tokens, on backend b: as
// the trainer does, checkpointed when memory is short and b's checkpoints save
// memory (the cpu backend's do; MLX's autodiff keeps what it keeps).
func EstimateTrain(b mx.Backend, cfg inference.Config, weightBytes int64, batch, seq, rank, layers int) trainer.Estimate {
	if layers < 0 || layers > cfg.NumHiddenLayers {
		layers = cfg.NumHiddenLayers
	}
	if cfg.MaxPositionEmbeddings > 0 {
		seq = min(seq, cfg.MaxPositionEmbeddings)
	}
	// Seven linears a block, each with rank·(in+out) adapter weights.
	h, inter := int64(cfg.HiddenSize), int64(cfg.IntermediateSize)
	adapter := int64(layers) * int64(rank) * (4*2*h + 3*(h+inter))
	return trainer.EstimateRun(b, weightBytes, cfg, batch, seq, adapter, false)
}

// FormatBytes writes a size for a person: 1.23 GiB, 4.5 MiB, 300 KiB, 12 B.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
