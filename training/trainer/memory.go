package trainer

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Estimate is what a run is expected to hold in memory at its peak.
type Estimate struct {
	Weights     int64 // the base model as stored
	Activations int64 // kept for the backward pass of one micro-batch
	Optimizer   int64 // adapters, their gradients and two moments
	// Headroom is memory of arrays already dead but not yet reclaimed: the backend
	// collects once new allocations pass half of what is live.
	Headroom  int64
	Available int64 // memory the system reports available; 0 when unknown
}

// Total is the sum of the parts.
func (e Estimate) Total() int64 { return e.Weights + e.Activations + e.Optimizer + e.Headroom }

// EstimateMemory sizes a run of batch rows of seq tokens: per layer and token
// the float32 intermediates of a transformer block (≈ 8·hidden + 4·intermediate
// values, attention scores of heads·seq, twice for the backward pass), the
// logits three times (logits, log-softmax, their gradient), and four copies of
// the adapter parameters.
func EstimateMemory(weights int64, hidden, intermediate, heads, layers, vocab, batch, seq int, adapterParams int64) Estimate {
	perToken := int64(layers)*(int64(8*hidden+4*intermediate)+int64(2*heads*seq))*4*2 + int64(vocab)*4*3
	act := int64(batch) * int64(seq) * perToken
	return Estimate{
		Weights:     weights,
		Activations: act,
		Optimizer:   4 * 4 * adapterParams,
		Headroom:    act / 2,
		Available:   availableMemory(),
	}
}

// memoryCheck reports the estimate, and warns when it exceeds what the
// system has available; the event carries the numbers for the caller's advice.
func (r *run) memoryCheck(adapterParams int64) {
	mc := r.m.Config()
	seq := r.cfg.MaxSeqLength
	if tr := r.ar.batcher.Truncation(); tr.Longest > 0 && tr.Longest-1 < seq {
		seq = tr.Longest - 1
	}
	inter := mc.IntermediateSize
	e := EstimateMemory(r.m.WeightBytes(), mc.HiddenSize, inter, mc.NumAttentionHeads, mc.NumHiddenLayers, mc.VocabSize, r.cfg.BatchSize, seq, adapterParams)
	msg := fmt.Sprintf("memory estimate %s: weights %s, activations %s (batch %d × %d tokens), adapters and optimizer %s, reuse headroom %s",
		fmtBytes(e.Total()), fmtBytes(e.Weights), fmtBytes(e.Activations), r.cfg.BatchSize, seq, fmtBytes(e.Optimizer), fmtBytes(e.Headroom))
	if e.Available > 0 {
		msg += fmt.Sprintf("; %s available", fmtBytes(e.Available))
	}
	r.emit(Event{Kind: EventInfo, Message: msg, Memory: &e})
	if e.Available > 0 && e.Total() > e.Available {
		r.emit(Event{Kind: EventWarning, Memory: &e, Message: fmt.Sprintf(
			"this run may not fit in memory: %s needed with batch %d × %d tokens, %s available",
			fmtBytes(e.Total()), r.cfg.BatchSize, seq, fmtBytes(e.Available))})
	}
}

// meminfoAvailable reads MemAvailable from /proc/meminfo (Linux).
func meminfoAvailable() int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb * 1024
				}
			}
		}
	}
	return 0
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
