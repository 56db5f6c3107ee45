package inference

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	mx "github.com/inloop/inloop/mlxbridge"
	cpubackend "github.com/inloop/inloop/mlxbridge/cpu"
)

// lossCase is a two-row batch whose second row is shorter (padded, masked) and
// whose first positions are a prompt that is not learned.
func lossCase(b mx.Backend, vocab int) (tokens, targets, mask *mx.Array) {
	const rows, l = 2, 11
	ids := tokenSeq(rows*(l+1), vocab, 4)
	in, tg, mk := make([]int32, rows*l), make([]int32, rows*l), make([]float32, rows*l)
	for r := range rows {
		for i := range l {
			in[r*l+i], tg[r*l+i] = int32(ids[r*(l+1)+i]), int32(ids[r*(l+1)+i+1])
			if i >= 3 && (r == 0 || i < 8) {
				mk[r*l+i] = 1
			}
		}
	}
	mk[5] = 0.5 // a weighted position
	return mx.FromData(b, mx.Int32, in, rows, l), mx.FromData(b, mx.Int32, tg, rows, l), mx.FromData(b, mx.Float32, mk, rows, l)
}

// Loss, with and without checkpointed blocks and in chunks of any size, is
// CrossEntropyMasked of Forward's logits, in value and in the gradient of
// every weight: when all weights train (the output projection too, so the
// chunks recompute) and when only the blocks' do (the chunks keep their
// gradient).
func TestLossMatchesForward(t *testing.T) {
	b, _ := mx.Open("cpu")
	for _, arch := range []string{"llama", "qwen3"} {
		m := NewRandom(tinyConfig(arch), 5, b)
		tokens, targets, mask := lossCase(b, m.cfg.VocabSize)
		all := m.Params()
		var blocks []string
		for n := range all {
			if n != "model.embed_tokens.weight" && n != "model.norm.weight" {
				blocks = append(blocks, n)
			}
		}
		slices.Sort(blocks)
		for _, train := range []struct {
			name  string
			names []string
		}{{"all weights", slices.Sorted(func(yield func(string) bool) {
			for n := range all {
				if !yield(n) {
					return
				}
			}
		})}, {"blocks only", blocks}} {
			xs := make([]*mx.Array, len(train.names))
			for i, n := range train.names {
				xs[i] = all[n]
			}
			grad := func(loss func(m *Model) *mx.Array) (float32, [][]float32) {
				outs, gs, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
					set := map[string]*mx.Array{}
					for i, n := range train.names {
						set[n] = p[i]
					}
					mm, err := m.WithParams(set)
					if err != nil {
						return []*mx.Array{mx.ErrorArray(err)}
					}
					return []*mx.Array{loss(mm)}
				}, xs)
				if err != nil {
					t.Fatal(err)
				}
				v := make([][]float32, len(gs))
				for i, g := range gs {
					v[i] = floats(t, g)
				}
				return floats(t, outs[0])[0], v
			}
			wantLoss, want := grad(func(m *Model) *mx.Array {
				return mx.CrossEntropyMasked(m.Forward(tokens, nil), targets, mask)
			})
			for _, o := range []LossOptions{{}, {ChunkRows: 1}, {ChunkRows: 4}, {CheckpointBlocks: true}, {CheckpointBlocks: true, ChunkRows: 3}} {
				t.Run(fmt.Sprintf("%s/%s/%+v", arch, train.name, o), func(t *testing.T) {
					got, g := grad(func(m *Model) *mx.Array { return m.Loss(tokens, targets, mask, o) })
					if d := maxAbsDiff([]float32{got}, []float32{wantLoss}); d > 1e-5 {
						t.Errorf("loss %v, CrossEntropyMasked(Forward) %v", got, wantLoss)
					}
					for i := range g {
						if d := maxAbsDiff(g[i], want[i]); d > 1e-5 {
							t.Errorf("gradient of %s differs by %g", train.names[i], d)
						}
					}
				})
			}
		}
	}
}

func TestLossErrors(t *testing.T) {
	b, _ := mx.Open("cpu")
	m := NewRandom(tinyConfig("llama"), 5, b)
	tokens, targets, mask := lossCase(b, m.cfg.VocabSize)
	if l := m.Loss(tokens, mx.Reshape(targets, 1, -1), mask, LossOptions{}); l.Err() == nil {
		t.Errorf("targets of another shape gave %s", l)
	}
	if l := m.Loss(tokens, targets, mask, LossOptions{ChunkRows: -1}); l.Err() == nil {
		t.Errorf("negative chunks gave %s", l)
	}
	if l := m.Loss(tokens, targets, mx.ZerosLike(mask), LossOptions{}); floats(t, l)[0] != 0 {
		t.Errorf("nothing learned gave loss %v, want 0", floats(t, l))
	}
}

// With every block checkpointed and the loss in chunks, the forward pass of a
// training step keeps a fraction of the memory for the backward pass: here,
// a 12-block model at 384 tokens. What it keeps is counted array by array,
// after a collection, at the end of the forward pass.
func TestLossCheckpointMemory(t *testing.T) {
	b, _ := mx.Open("cpu")
	cfg := tinyConfig("qwen3")
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers, cfg.VocabSize = 256, 768, 12, 4096
	m := NewRandom(cfg, 5, b)
	const l = 384
	ids := tokenSeq(l+1, cfg.VocabSize, 9)
	in, tg := make([]int32, l), make([]int32, l)
	for i := range l {
		in[i], tg[i] = int32(ids[i]), int32(ids[i+1])
	}
	tokens, targets := mx.FromData(b, mx.Int32, in, 1, l), mx.FromData(b, mx.Int32, tg, 1, l)
	mask := mx.Full(b, []int{1, l}, 1, mx.Float32)
	// Train the attention output projections: their gradient is small, the
	// activations behind it are not.
	var names []string
	var xs []*mx.Array
	for n, p := range m.Params() {
		if strings.HasSuffix(n, "o_proj.weight") {
			names, xs = append(names, n), append(xs, p)
		}
	}
	var base int64
	kept := func(loss func(*Model) *mx.Array) int64 {
		var k int64
		_, g, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
			set := map[string]*mx.Array{}
			for i, n := range names {
				set[n] = p[i]
			}
			mm, _ := m.WithParams(set)
			out := loss(mm)
			k = liveArrays() - base
			return []*mx.Array{out}
		}, xs)
		if err != nil || mx.Eval(g...) != nil {
			t.Fatal(err)
		}
		return k
	}
	// A first forward pass lets go of what building the model left behind.
	mx.Eval(m.Forward(tokens, nil))
	base = liveArrays()
	plain := kept(func(m *Model) *mx.Array { return mx.CrossEntropyMasked(m.Forward(tokens, nil), targets, mask) })
	ck := kept(func(m *Model) *mx.Array {
		return m.Loss(tokens, targets, mask, LossOptions{CheckpointBlocks: true, ChunkRows: 64})
	})
	runtime.KeepAlive(m) // its weights are not what the step keeps
	// The block inputs: 12 × 384 × 256 floats, 4.5 MiB.
	t.Logf("kept for the backward pass: plain %d KiB, checkpointed %d KiB", plain>>10, ck>>10)
	if ck*8 > plain {
		t.Errorf("checkpointed, the forward pass kept %d KiB, plainly %d KiB: not under an eighth", ck>>10, plain>>10)
	}
}

// liveArrays is the bytes of arrays alive, once the dead ones are collected
// (their buffers are released by cleanups that run after a collection, on a
// goroutine of their own: the figure must hold still for a while).
func liveArrays() int64 {
	var last int64 = -1
	still := 0
	for range 200 {
		runtime.GC()
		time.Sleep(time.Millisecond)
		a, _, _ := cpubackend.MemoryDetail()
		if a == last {
			if still++; still == 3 {
				break
			}
		} else {
			still = 0
		}
		last = a
	}
	return last
}

// SuffixLoss over a padded batch: the weighted sum of the listed positions'
// cross-entropies, equal to the same over SuffixRows' logits, value and
// gradient, whether the head runs at once or in chunks of positions.
func TestSuffixLoss(t *testing.T) {
	b, _ := mx.Open("cpu")
	m := NewRandom(tinyConfig("llama"), 5, b)
	const k = 1
	tokens, err := m.Tokens(tokenSeq(9, m.cfg.VocabSize, 1), tokenSeq(9, m.cfg.VocabSize, 2))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Prefix(tokens, k)
	rows := []int32{2, 3, 4, 8, 9 + 5, 9 + 6, 9 + 7}
	targets := []int32{5, 1, 7, 2, 9, 4, 3}
	weights := []float32{0.1, 0.2, 0.1, 0.05, 0.3, 0.15, 0.1}
	grad := func(f func(h *mx.Array) *mx.Array) (float32, []float32) {
		outs, g, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array { return []*mx.Array{f(p[0])} }, []*mx.Array{h})
		if err != nil {
			t.Fatal(err)
		}
		return floats(t, outs[0])[0], floats(t, g[0])
	}
	want, wg := grad(func(h *mx.Array) *mx.Array {
		ce := mx.CrossEntropy(m.SuffixRows(h, k, rows), mx.FromData(b, mx.Int32, targets, len(targets)))
		return mx.Sum(mx.Mul(ce, mx.FromData(b, mx.Float32, weights, len(weights))), nil, false)
	})
	for _, chunk := range []int{0, 3} { // at once; in chunks of 3 (and a last of 1)
		got, gg := grad(func(h *mx.Array) *mx.Array {
			if chunk == 0 {
				return m.SuffixLoss(h, k, rows, targets, weights)
			}
			return m.chunkedLoss(m.suffixHidden(h, k, rows), targets, weights, chunk)
		})
		if d := got - want; d > 1e-5 || d < -1e-5 {
			t.Errorf("chunk %d: loss %g, want %g", chunk, got, want)
		}
		for i := range wg {
			if d := gg[i] - wg[i]; d > 1e-5 || d < -1e-5 {
				t.Fatalf("chunk %d: gradient [%d] = %g, want %g", chunk, i, gg[i], wg[i])
			}
		}
	}
	if l := m.SuffixLoss(h, k, rows, targets[:2], weights); l.Err() == nil {
		t.Error("two targets for seven positions gave no error")
	}
	if l := m.SuffixRows(h, k, []int32{18}); l.Err() == nil {
		t.Error("position 18 of a (2, 9) batch gave no error")
	}
}
