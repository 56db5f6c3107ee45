package trainer

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
)

// Estimate is what a run is expected to hold in memory at its peak.
type Estimate struct {
	Weights     int64 // the base model as stored
	Activations int64 // kept for the backward pass of one micro-batch
	Optimizer   int64 // adapters, their gradients and two moments
	// Headroom is memory of arrays already dead but not yet reclaimed: the backend
	// collects once new allocations pass half of what is live, and 64 MiB.
	Headroom  int64
	Available int64 // memory the system reports available; 0 when unknown
	// Checkpointed is an estimate with every block checkpointed
	// (inference.LossOptions.CheckpointBlocks).
	Checkpointed bool
}

// Total is the sum of the parts.
func (e Estimate) Total() int64 { return e.Weights + e.Activations + e.Optimizer + e.Headroom }

// Fits reports whether the estimate is within what the system has available
// (when that is unknown, it fits).
func (e Estimate) Fits() bool { return e.Available <= 0 || e.Total() <= e.Available }

// EstimateMemory sizes a run of batch rows of seq tokens: per layer and token
// the float32 intermediates of a transformer block (≈ 8·hidden + 4·intermediate
// values, attention scores of heads·seq, twice for the backward pass), the
// logits three times (logits, log-softmax, their gradient; twice with
// s.FusedLoss, whose backward is one pass) — of one chunk of the
// loss with s.ChunkedLoss (inference.Loss takes LossChunkBytes of logits at a
// time), of every position otherwise — and four copies of the adapter
// parameters. With s.Checkpoint, the blocks keep only their inputs, and one
// block's intermediates exist at a time.
// The arithmetic saturates: sizes from flags (a batch of 10¹⁸) must give a
// huge estimate, not an overflowed small one.
func EstimateMemory(weights int64, hidden, intermediate, heads, layers, vocab, batch, seq int, adapterParams int64, s Saving) Estimate {
	perLayer := satAdd(satAdd(satMul(8, int64(hidden)), satMul(4, int64(intermediate))), satMul(2, satMul(int64(heads), int64(seq))))
	tokens := satMul(int64(batch), int64(seq))
	var act int64
	if s.Checkpoint {
		act = satMul(tokens, satAdd(satMul(int64(layers), satMul(4, int64(hidden))), satMul(perLayer, 8)))
	} else {
		act = satMul(tokens, satMul(satMul(int64(layers), perLayer), 8))
	}
	logitRows := tokens
	if s.ChunkedLoss {
		logitRows = min(tokens, max(32, int64(inference.LossChunkBytes)/max(1, 4*int64(vocab))))
	}
	perLogit := int64(12)
	if s.FusedLoss {
		perLogit = 8
	}
	act = satAdd(act, satMul(logitRows, satMul(int64(vocab), perLogit)))
	return Estimate{
		Weights:      weights,
		Activations:  act,
		Optimizer:    satMul(16, adapterParams),
		Headroom:     max(act/2, gcFloor),
		Available:    systemAvailable(),
		Checkpointed: s.Checkpoint,
	}
}

// Saving is what a run does to hold less memory, as its backend allows
// (mx.Checkpoints): the loss in chunks, each chunk's logits gone once its gradient
// is taken, every block recomputed in the backward pass, and the cross-entropy's
// backward in one pass (mx.FusesCrossEntropy).
type Saving struct{ ChunkedLoss, Checkpoint, FusedLoss bool }

// savingFor is what a run on b can save, with blocks checkpointed or not.
func savingFor(b mx.Backend, checkpoint bool) Saving {
	ok := mx.Checkpoints(b)
	return Saving{ChunkedLoss: ok, Checkpoint: ok && checkpoint, FusedLoss: mx.FusesCrossEntropy(b)}
}

// EstimateRun is the estimate a run of a model of cfg on b is admitted on: with
// every block checkpointed when checkpoint asks for it, or when memory is short and
// the run fits only so — where b's checkpoints save memory at all (mx.Checkpoints).
func EstimateRun(b mx.Backend, weights int64, cfg inference.Config, batch, seq int, adapterParams int64, checkpoint bool) Estimate {
	est := func(checkpoint bool) Estimate {
		return EstimateMemory(weights, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumAttentionHeads, cfg.NumHiddenLayers, cfg.VocabSize,
			batch, seq, adapterParams, savingFor(b, checkpoint))
	}
	e := est(checkpoint)
	if !e.Fits() && !e.Checkpointed && mx.Checkpoints(b) {
		// Short of memory: recomputing the blocks in the backward pass costs
		// time, not results.
		if ck := est(true); ck.Fits() {
			return ck
		}
	}
	return e
}

// gcFloor is the cpu backend's least allocation between two collections.
const gcFloor = 64 << 20

// systemAvailable is availableMemory, replaced in tests.
var systemAvailable = availableMemory

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satMul multiplies sizes (never negative), saturating at math.MaxInt64.
func satMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// memoryCheck reports the estimate the run was admitted on (see
// adapterRun.checkMemory, which refused it if it did not fit and was not
// forced), and warns when it was forced past what the system has available;
// the event carries the numbers for the caller's advice.
func (r *run) memoryCheck(int64) {
	me := r.ar.memory
	if me == nil {
		return
	}
	e := me.Estimate
	msg := fmt.Sprintf("memory estimate %s: weights %s, activations %s (batch %d × %d tokens), adapters and optimizer %s, reuse headroom %s",
		fmtBytes(e.Total()), fmtBytes(e.Weights), fmtBytes(e.Activations), me.Batch, me.Seq, fmtBytes(e.Optimizer), fmtBytes(e.Headroom))
	if e.Available > 0 {
		msg += fmt.Sprintf("; %s available", fmtBytes(e.Available))
	}
	switch {
	case e.Checkpointed && r.ar.opts.GradCheckpoint:
		msg += "; blocks recomputed in the backward pass (grad checkpoint)"
	case e.Checkpointed:
		msg += "; memory is short, so blocks are recomputed in the backward pass (grad checkpoint: about a third more time per step)"
	}
	r.emit(Event{Kind: EventInfo, Message: msg, Memory: &e})
	if e.Available > 0 && e.Total() > e.Available {
		r.emit(Event{Kind: EventWarning, Memory: &e, Message: fmt.Sprintf(
			"forced: this run may not fit in memory: %s needed with batch %d × %d tokens, %s available",
			fmtBytes(e.Total()), me.Batch, me.Seq, fmtBytes(e.Available))})
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
