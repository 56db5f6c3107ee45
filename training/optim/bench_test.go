package optim

import (
	"fmt"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// loraSized is 64 adapter matrices of 8×2048, about a million parameters: the
// scale of a rank-8 LoRA on a small model.
func loraSized() (params, grads map[string]*mx.Array) {
	params, grads = map[string]*mx.Array{}, map[string]*mx.Array{}
	for i := range 64 {
		name := fmt.Sprintf("model.layers.%d.lora_a", i)
		params[name] = mx.FromFloat32(randn(uint64(i), 8*2048), 8, 2048)
		grads[name] = mx.FromFloat32(randn(uint64(1000+i), 8*2048), 8, 2048)
	}
	return params, grads
}

func BenchmarkAdamWStep(b *testing.B) {
	params, grads := loraSized()
	o := NewAdamW(Constant(1e-4))
	o.BiasCorrection = true
	b.SetBytes(int64(8 * 2048 * 4 * 64))
	for b.Loop() {
		var err error
		if params, err = o.Step(params, grads); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClipGlobalNorm(b *testing.B) {
	_, grads := loraSized()
	b.SetBytes(int64(8 * 2048 * 4 * 64))
	for b.Loop() {
		out, norm := ClipGlobalNorm(grads, 1)
		if _, err := norm.Item(); err != nil {
			b.Fatal(err)
		}
		if err := mx.Eval(out["model.layers.0.lora_a"]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllFinite(b *testing.B) {
	_, grads := loraSized()
	_, xs := Flatten(grads)
	b.SetBytes(int64(8 * 2048 * 4 * 64))
	for b.Loop() {
		if ok, err := AllFinite(xs...); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}
