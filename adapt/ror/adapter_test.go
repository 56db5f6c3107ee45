package ror

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/decide"
	"github.com/inloop/inloop/training/lora"
)

// adapterModel is the fixture model with a decision adapter on every linear
// layer of the demo (rank 8, lora_b small and random, so the adapter changes
// the features a little), written in decide's layout.
func adapterModel(t testing.TB) *decide.Model {
	t.Helper()
	setup(t)
	dir := filepath.Join(t.TempDir(), "with-adapter")
	if err := os.CopyFS(dir, os.DirFS(fixture.dir)); err != nil {
		t.Fatal(err)
	}
	cfg := lora.Config{NumLayers: -1, Rank: 8, Scale: 10, Seed: 3}
	a, _, err := lora.New(fixture.base, cfg)
	if err != nil {
		t.Fatal(err)
	}
	params := a.Params()
	r := rand.New(rand.NewPCG(5, 5))
	for _, n := range slices.Sorted(maps.Keys(params)) {
		if p := params[n]; filepath.Ext(n) == ".lora_b" {
			v := make([]float32, p.Size())
			for i := range v {
				v[i] = float32(0.002 * r.NormFloat64())
			}
			params[n] = mx.FromData(p.Backend(), mx.Float32, v, p.Shape()...)
		}
	}
	ac, err := lora.AdapterConfig(fixture.base, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := lora.SaveArrays(dir, params, ac); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, decide.MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Fatal(err)
	}
	meta["adapter"] = true
	if raw, err = json.Marshal(meta); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, decide.MetaFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := decide.Load(dir, fixture.base, fixture.tok)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func adapterBits(t testing.TB, l *Learner) map[string][]uint32 {
	t.Helper()
	top := l.live.TopAdapter()
	if top == nil {
		t.Fatal("the Learner's model has no adapter")
	}
	return headBits(t, top.Params())
}

// With TrainAdapter a correction steps the decision adapter too, through the
// backbone; the new adapter is what Decide then reads, and Undo puts the old
// one back bit for bit.
func TestTrainAdapter(t *testing.T) {
	if testing.Short() {
		t.Skip("steps through the backbone: -short")
	}
	ctx := context.Background()
	m := adapterModel(t)
	l, err := New(ctx, m, fixture.base, fixture.tok, fixture.rows[anchorFrom:anchorFrom+20], Options{TrainAdapter: true, Replay: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Remember(fixture.rows[:8]); err != nil {
		t.Fatal(err)
	}
	var w *item
	for _, r := range fixture.rows[candidateFrom:candidateTo] {
		its, err := l.rowItems(r)
		if err != nil {
			t.Fatal(err)
		}
		if choice, _, err := l.answer(ctx, its[0]); err != nil {
			t.Fatal(err)
		} else if choice != its[0].label {
			w = its[0]
			break
		}
	}
	if w == nil {
		t.Fatal("no wrong team decision among the candidates")
	}
	probe := []string{w.state}
	adapter0, head0, answers0 := adapterBits(t, l), headBits(t, l.current.head), decideBits(t, l, probe)

	ev, err := l.ThumbDown(ctx, w.state, "team", optionName(0, w.label))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("adapter correction: %s after %d steps, flipped %v, loss %.3f → %.3f, anchor %.4f → %.4f, %.0f ms (steps %.0f, check %.0f)",
		ev.Kind, ev.Steps, ev.Flipped, ev.Loss, ev.LossAfter, ev.AnchorBefore, ev.AnchorAfter, ev.MS, ev.StepMS, ev.CheckMS)
	if ev.Kind != KindRetrain {
		t.Fatalf("the correction was %s (%s)", ev.Kind, ev.Detail)
	}
	if equalBits(adapterBits(t, l), adapter0) {
		t.Error("a kept adapter step left the adapter Decide reads as it was")
	}
	if !(ev.LossAfter < ev.Loss) {
		t.Errorf("the correction's loss went %.4f → %.4f", ev.Loss, ev.LossAfter)
	}
	ds, _, err := l.Decide(ctx, probe)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Flipped && ds[0][0].Choice != optionName(0, w.label) {
		t.Errorf("flipped, but Decide answers %s, not %s", ds[0][0].Choice, optionName(0, w.label))
	}
	// The answer the Learner gives for feedback is Decide's.
	_, conf, err := l.answer(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if p := ds[0][0].Probs[ds[0][0].Choice]; math.Abs(conf-p) > 1e-4 {
		t.Errorf("feedback sees confidence %.5f, Decide %.5f", conf, p)
	}

	if _, err := l.Undo(); err != nil {
		t.Fatal(err)
	}
	if !equalBits(adapterBits(t, l), adapter0) || !equalBits(headBits(t, l.current.head), head0) {
		t.Error("undo: the adapter or the head differs from version 0's")
	}
	if got := decideBits(t, l, probe); !slices.Equal(got, answers0) {
		t.Errorf("answers after undo %v, before %v", got, answers0)
	}
}
