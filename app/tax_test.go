package app

import (
	"context"
	"testing"
)

// The tax report on the demo model: examples in the prompt grow the prompt and its
// KV cache (and stop fitting the 512-token context), learned examples cost none.
func TestTaxReport(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a LoRA")
	}
	w := openTestWorkspace(t, t.TempDir())
	defer w.Close()
	rows, err := w.TaxReport(context.Background(), TaxSpec{Model: "demo", Shots: []int{0, 2, 64}, Eval: 4, Steps: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows", len(rows))
	}
	zero, two, many := rows[0], rows[1], rows[2]
	if !zero.InContext.Fits || zero.InContext != zero.Adapted {
		t.Errorf("with no examples both sides are the same: %+v", zero)
	}
	if two.InContext.PromptTokens <= zero.InContext.PromptTokens || two.InContext.KVBytes <= zero.InContext.KVBytes {
		t.Errorf("two examples in the prompt: %+v, none: %+v", two.InContext, zero.InContext)
	}
	if two.Adapted.KVBytes != zero.InContext.KVBytes || two.Adapted.TrainDuration <= 0 {
		t.Errorf("learned examples: %+v, want the KV bytes of no examples (%d)", two.Adapted, zero.InContext.KVBytes)
	}
	if many.InContext.Fits || !many.Adapted.Fits {
		t.Errorf("64 examples: in the prompt fits=%v, learned fits=%v; want false, true", many.InContext.Fits, many.Adapted.Fits)
	}
	for _, r := range rows {
		if a := r.Adapted.Accuracy; a < 0 || a > 1 {
			t.Errorf("accuracy %v", a)
		}
	}
}
