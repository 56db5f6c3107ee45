package inference

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	mx "github.com/inloop/inloop/mlxbridge"
)

// segmentsOf is block i's compiled head and tail.
func segmentsOf(m *Model, i int) (head, tail *segment) {
	switch b := m.layers[i].(type) {
	case *llamaBlock:
		return &b.head.segment, &b.tail.segment
	case *qwen3Block:
		return &b.head.segment, &b.tail.segment
	}
	panic(fmt.Sprintf("block %T", m.layers[i]))
}

// TestCompiledBlocksMLX decodes with every block's head and tail compiled
// (mx.Compile) and with their ops, on the mlx backend (skipped where libmlxc does
// not load): the logits of every step are the same bit for bit on MLX's CPU
// device (a GPU fuses the traces' elementwise ops: within rounding there). It
// covers Llama, Qwen2 (biases on q/k/v) and Qwen3 (per-head norms), float32 and
// 4-bit weights, 8-bit activations, adapters on block 0's query and block 1's
// down projection (compiled too, with the adapters' arrays as inputs), the same
// with dropout on block 1's (a trainer's: that tail runs as ops), and an attention
// hook on block 0 (its head runs as ops, to hand the hook its input, which
// passHook reads).
func TestCompiledBlocksMLX(t *testing.T) {
	be, err := mx.Open("mlx")
	if err != nil {
		t.Skipf("mlx backend: %v", err)
	}
	if c := mx.Compile(be, 1, func(in []*mx.Array) []*mx.Array { return in }); !c.Compiles() {
		t.Skip("this libmlxc does not compile")
	}
	gpu := onGPU(be)
	defer func() { compileBlocks = true }()
	for _, c := range []struct {
		arch          string
		bits          int
		int8, adapter bool
		dropout, hook bool
	}{{"llama", 0, false, false, false, false}, {"qwen2", 0, false, false, false, false}, {"qwen3", 0, false, false, false, false},
		{"llama", 4, false, false, false, false}, {"qwen3", 4, true, false, false, false}, {"llama", 0, false, true, false, false},
		{"llama", 4, false, true, true, false}, {"qwen3", 0, false, false, false, true}} {
		name := fmt.Sprintf("%s/bits=%d/int8=%v/adapter=%v/dropout=%v/hook=%v", c.arch, c.bits, c.int8, c.adapter, c.dropout, c.hook)
		t.Run(name, func(t *testing.T) {
			cfg := tinyConfig(c.arch)
			cfg.HiddenSize, cfg.IntermediateSize = 64, 128
			if c.bits > 0 {
				cfg.Quantization = &Quantization{QuantParams: QuantParams{GroupSize: 32, Bits: c.bits}}
			}
			m := NewRandom(cfg, 7, be)
			m.SetInt8Decode(c.int8)
			if c.adapter {
				lora := func(seed uint64, l *Linear) LoRA {
					return LoRA{A: randomOn(be, seed, l.In, 2), B: randomOn(be, seed+1, 2, l.Out), Scale: 2}
				}
				a := NewAdapter("user", map[string]LoRA{
					"model.layers.0.self_attn.q_proj": lora(3, m.layers[0].(*llamaBlock).Attn.Q),
					"model.layers.1.mlp.down_proj":    lora(5, m.layers[1].(*llamaBlock).MLP.Down),
				})
				if _, err := m.PushAdapter(a); err != nil {
					t.Fatal(err)
				}
				if c.dropout { // what a trainer installs while it trains: an identity here
					m.layers[1].(*llamaBlock).MLP.Down.adapters[0].Drop = func(x *mx.Array) *mx.Array { return x }
				}
			}
			session := func() *Session {
				s := NewSession(m)
				if c.hook {
					if err := s.cache.SetHook(0, &passHook{}); err != nil {
						t.Fatal(err)
					}
				}
				return s
			}
			ids := tokenSeq(24, cfg.VocabSize, 3)
			compileBlocks = false
			want := stepLogits(t, session(), ids)
			compileBlocks = true
			s := session()
			got := stepLogits(t, s, ids)
			for i := range got {
				d := maxAbsDiff(got[i], want[i])
				if d != 0 && (!gpu || d > 1e-4*spreadOf(want[i])) {
					t.Fatalf("step %d: compiled blocks' logits differ from the ops' by %g", i, d)
				}
			}
			if h, ok := s.cache.Hook(0).(*passHook); c.hook && (!ok || h.calls != len(ids)) {
				t.Fatalf("the hook ran %d times for %d positions", h.calls, len(ids))
			}
			compiled := func(s *segment) bool { return s.c != nil && s.c.Compiles() }
			for i := range m.layers {
				head, tail := segmentsOf(m, i)
				wantHead := !(c.hook && i == 0)
				wantTail := !(c.dropout && i == 1)
				if compiled(head) != wantHead || compiled(tail) != wantTail {
					t.Errorf("block %d: head compiled %v, tail %v; want %v, %v", i, compiled(head), compiled(tail), wantHead, wantTail)
				}
			}
			if slices.Equal(want[0], want[len(want)-1]) {
				t.Fatal("the steps' logits do not change")
			}
		})
	}
}

// randomOn is a (rows, cols) float32 array on b of values uniform in ±0.3.
func randomOn(b mx.Backend, seed uint64, rows, cols int) *mx.Array {
	return mx.FromData(b, mx.Float32, uniform(seed, rows*cols, 0, 0.3), rows, cols)
}

// TestCompiledBlocksConcurrentMLX decodes the first tokens of fresh forks from two
// goroutines at once, one through Generate (its steps run on the mlx backend's
// thread) and one calling ForwardLast from its own goroutine, so that both look
// for the same blocks' compiled pieces while one of them is being made. Making
// one under the block's lock deadlocked here: the holder waited for the backend's
// thread, which waited for the lock.
func TestCompiledBlocksConcurrentMLX(t *testing.T) {
	be, err := mx.Open("mlx")
	if err != nil {
		t.Skipf("mlx backend: %v", err)
	}
	base := NewRandom(tinyConfig("llama"), 7, be)
	prompt := tokenSeq(8, base.cfg.VocabSize, 1)
	done := make(chan error, 1)
	go func() {
		for range 100 {
			m := base.Fork()
			errs := make(chan error, 2)
			go func() {
				_, err := Generate(context.Background(), NewSession(m), prompt, GenerateOptions{MaxTokens: 3}, func(int) bool { return false })
				errs <- err
			}()
			go func() {
				s := NewSession(m)
				if _, _, err := s.Prefill(prompt); err != nil {
					errs <- err
					return
				}
				errs <- mx.Eval(m.ForwardLast(mx.FromData(be, mx.Int32, []int32{5}, 1, 1), s.cache))
			}()
			for range 2 {
				if err := <-errs; err != nil {
					done <- err
					return
				}
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("two goroutines decoding one model deadlocked")
	}
}

// TestCompiledBlocksAdapterSwapMLX replaces the adapter halfway through a decode,
// as test-time training and a correction's step do, with compiled blocks and
// with ops: every step's logits are the same, so the compiled pieces use the
// adapter the layers hold at each call, not the one they were traced with.
func TestCompiledBlocksAdapterSwapMLX(t *testing.T) {
	be, err := mx.Open("mlx")
	if err != nil {
		t.Skipf("mlx backend: %v", err)
	}
	cfg := tinyConfig("llama")
	cfg.HiddenSize, cfg.IntermediateSize = 64, 128
	ids := tokenSeq(20, cfg.VocabSize, 4)
	defer func() { compileBlocks = true }()
	run := func(compiled bool) [][]float32 {
		compileBlocks = compiled
		m := NewRandom(cfg, 9, be)
		adapter := func(seed uint64) *Adapter {
			loras := map[string]LoRA{}
			m.Linears(func(path string, l *Linear) {
				if strings.HasPrefix(path, "model.layers.") {
					loras[path] = LoRA{A: randomOn(be, seed, l.In, 4), B: randomOn(be, seed+1, 4, l.Out), Scale: 1.5}
					seed += 2
				}
			})
			return NewAdapter("ttt", loras)
		}
		if _, err := m.PushAdapter(adapter(100)); err != nil {
			t.Fatal(err)
		}
		return stepLogitsWith(t, NewSession(m), ids, func(i int) {
			if i == len(ids)/2 {
				if _, err := m.ReplaceAdapter(adapter(500)); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	want, got := run(false), run(true)
	for i := range want {
		if d := maxAbsDiff(got[i], want[i]); d != 0 && (!onGPU(be) || d > 1e-4*spreadOf(want[i])) {
			t.Fatalf("step %d: compiled blocks' logits differ from the ops' by %g", i, d)
		}
	}
	if maxAbsDiff(want[len(ids)/2-1], want[len(ids)/2]) == 0 {
		t.Fatal("replacing the adapter changed nothing")
	}
}

// onGPU reports whether b computes on a GPU (where compiled pieces are fused).
func onGPU(b mx.Backend) bool { return deviceOf(b) == "gpu" }
