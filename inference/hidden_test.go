package inference

import (
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// The rows OutputRows gives, against the hidden states Hidden gives, must
// reproduce Forward's logits for tied and untied heads, dense and quantized.
func TestOutputRowsReproduceLogits(t *testing.T) {
	b := cpu(t)
	for _, tc := range []struct {
		name  string
		tied  bool
		quant bool
	}{{"tied", true, false}, {"untied", false, false}, {"tied q4", true, true}, {"untied q8", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig("llama")
			cfg.TieWordEmbeddings = tc.tied
			if tc.quant {
				bits := 4
				if !tc.tied {
					bits = 8
				}
				cfg.Quantization = &Quantization{QuantParams: QuantParams{GroupSize: 32, Bits: bits}}
			}
			m := NewRandom(cfg, 3, b)
			ids := tokenSeq(7, cfg.VocabSize, 5)
			toks, err := m.Tokens(ids)
			if err != nil {
				t.Fatal(err)
			}
			want := floats(t, m.Forward(toks, nil)) // (1, 7, vocab)
			pick := []int{0, 5, 96, 5}
			rows, err := m.OutputRows(pick)
			if err != nil {
				t.Fatal(err)
			}
			if got := rows.Shape(); len(got) != 2 || got[0] != len(pick) || got[1] != cfg.HiddenSize || rows.DType() != mx.Float32 {
				t.Fatalf("rows %v %s, want (%d, %d) float32", got, rows.DType(), len(pick), cfg.HiddenSize)
			}
			got := floats(t, mx.MatmulT(m.Hidden(toks, nil), rows, false, true)) // (1, 7, 4)
			for p := range ids {
				for j, id := range pick {
					g, w := got[p*len(pick)+j], want[p*cfg.VocabSize+id]
					if d := g - w; d > 1e-4 || d < -1e-4 {
						t.Fatalf("position %d token %d: Hidden·row = %g, want logit %g", p, id, g, w)
					}
				}
			}
		})
	}
	m := NewRandom(tinyConfig("llama"), 3, b)
	for _, bad := range [][]int{nil, {97}, {-1}} {
		if _, err := m.OutputRows(bad); err == nil {
			t.Errorf("OutputRows(%v): no error", bad)
		}
	}
}
