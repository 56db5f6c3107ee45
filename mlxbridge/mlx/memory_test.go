//go:build cgo && (darwin || linux)

package mlx

import (
	"errors"
	"runtime"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// TestTrainingLoopMemoryBounded trains a small MLP for 200 steps of ValueAndGrad
// plus an SGD update, the way a training loop does, with no explicit frees, and
// checks that MLX's active memory stops growing: the arrays of old steps must be
// released through their cleanups.
func TestTrainingLoopMemoryBounded(t *testing.T) {
	be := openOrSkip(t)
	const batch, in, hidden, out = 64, 128, 256, 16
	x := randn(be, 1, batch, in)
	labels := make([]int32, batch)
	for i := range labels {
		labels[i] = int32(i % out)
	}
	y := mx.FromData(be, mx.Int32, labels, batch)
	params := []*mx.Array{
		mx.MulScalar(randn(be, 2, in, hidden), 0.1), mx.Full(be, []int{hidden}, 0, mx.Float32),
		mx.MulScalar(randn(be, 3, hidden, out), 0.1), mx.Full(be, []int{out}, 0, mx.Float32),
	}
	loss := func(p []*mx.Array) []*mx.Array {
		h := mx.Silu(mx.Add(mx.Matmul(x, p[0]), p[1]))
		logits := mx.Add(mx.Matmul(h, p[2]), p[3])
		return []*mx.Array{mx.Mean(mx.CrossEntropy(logits, y), nil, false)}
	}
	step := func() float32 {
		outs, grads, err := mx.ValueAndGrad(loss, params)
		if err != nil {
			t.Fatal(err)
		}
		for i := range params {
			params[i] = mx.Sub(params[i], mx.MulScalar(grads[i], 0.1))
		}
		if err := mx.Eval(append(params, outs[0])...); err != nil {
			t.Fatal(err)
		}
		l, _ := outs[0].Item()
		return l
	}
	var paramBytes int64
	for _, p := range params {
		paramBytes += p.Nbytes()
	}
	var at20, worst int64
	first := step()
	var last float32
	for i := 1; i <= 200; i++ {
		last = step()
		active, _ := be.Memory()
		if i == 20 {
			at20 = active
		}
		if i > 20 {
			worst = max(worst, active)
		}
	}
	be.Sweep()
	swept, peak := be.Memory()
	// With a Sweep after every step, only the live arrays remain.
	var sweptWorst int64
	for i := 0; i < 20; i++ {
		step()
		be.Sweep()
		active, _ := be.Memory()
		sweptWorst = max(sweptWorst, active)
	}
	t.Logf("with Sweep after each of 20 more steps: worst active %d KiB", sweptWorst>>10)
	if sweptWorst > 4*paramBytes+x.Nbytes()+1<<20 {
		t.Errorf("with a Sweep per step, %d KiB stay active; want about params + inputs (%d KiB)", sweptWorst>>10, (paramBytes+x.Nbytes())>>10)
	}
	t.Logf("params %d KiB; MLX active after step 20: %d KiB, worst over steps 21-200: %d KiB, after Sweep: %d KiB; peak %d KiB; loss %.4f -> %.4f",
		paramBytes>>10, at20>>10, worst>>10, swept>>10, peak>>10, first, last)
	// Each step makes about 1 MiB of arrays; without releases 180 steps would hold
	// ~180 MiB. Allow one collection's worth of garbage (the backend starts a
	// collection when live bytes double, at 64 MiB at least).
	if limit := at20 + minGCBytes + 8<<20; worst > limit {
		t.Errorf("active memory grew to %d KiB over 180 steps (step 20: %d KiB, limit %d KiB)", worst>>10, at20>>10, limit>>10)
	}
	if swept > at20+4<<20 {
		t.Errorf("after Sweep %d KiB are active, want about the step-20 level %d KiB", swept>>10, at20>>10)
	}
	if !(last < first) {
		t.Errorf("loss did not fall: %.4f -> %.4f", first, last)
	}
	runtime.KeepAlive(x)
}

func TestFree(t *testing.T) {
	be := openOrSkip(t)
	a := mx.FromData(be, mx.Float32, []float32{1, 2, 3}, 3)
	b := mx.Wrap(be, a.Handle(), a.Shape(), a.DType()) // shares a's handle
	be.Free(a)
	be.Free(a) // twice is harmless
	if _, err := b.Float32s(); !errors.Is(err, errFreed) {
		t.Errorf("reading a freed array: got %v, want %v", err, errFreed)
	}
	if err := mx.Exp(a).Err(); err == nil {
		t.Errorf("op on a freed array: no error")
	}
}

func TestMemoryLimits(t *testing.T) {
	be := openOrSkip(t)
	prev, err := be.SetCacheLimit(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	// MLX's allocator without a GPU keeps no cache and reports a limit of 0.
	if back, err := be.SetCacheLimit(prev); err != nil || (be.gpu && back != 1<<20) {
		t.Errorf("cache limit: got %d, %v; want %d", back, err, 1<<20)
	}
	prev, err = be.SetMemoryLimit(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := be.SetMemoryLimit(prev); err != nil || back != 1<<30 {
		t.Errorf("memory limit: got %d, %v; want %d", back, err, 1<<30)
	}
	if err := be.ClearCache(); err != nil {
		t.Fatal(err)
	}
	be.ResetPeakMemory()
	a := mx.Full(be, []int{1 << 20}, 1, mx.Float32)
	if err := mx.Eval(a); err != nil {
		t.Fatal(err)
	}
	active, peak := be.Memory()
	if active < 4<<20 || peak < active {
		t.Errorf("after a 4 MiB array: active %d, peak %d", active, peak)
	}
	if got, _, ok := mx.Memory(be); !ok || got < 4<<20 { // queued frees may have run since
		t.Errorf("mlxbridge.Memory: %d, %v; want at least the 4 MiB array", got, ok)
	}
	t.Logf("cache %d bytes", be.CacheMemory())
	runtime.KeepAlive(a)
}
