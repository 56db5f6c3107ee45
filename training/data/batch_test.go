package data

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

func ex(tokens []int32, mask string) Example {
	m := make([]bool, len(mask))
	for i := range mask {
		m[i] = mask[i] == '1'
	}
	return Example{Tokens: tokens, Mask: m}
}

func handExamples() []Example {
	return []Example{
		ex([]int32{1, 2, 3}, "001"),
		ex([]int32{4, 5, 6, 7, 8}, "11111"),
		ex([]int32{9, 10}, "01"),
		ex([]int32{11, 12, 13, 14}, "0111"),
	}
}

func TestBatchPaddingByHand(t *testing.T) {
	b, err := NewBatcher(handExamples(), BatchOptions{BatchSize: 2, MaxSeqLen: 10, PadID: -1})
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", b.Len())
	}
	want := []Batch{
		{B: 2, L: 2, // examples 2 (2 tokens) and 0 (3 tokens)
			IDs:     []int32{9, -1, 1, 2},
			Targets: []int32{10, -1, 2, 3},
			Mask:    []float32{1, 0, 0, 1},
			Lengths: []int32{1, 2},
			Rows:    []int{2, 0},
			At:      Position{0, 0}},
		{B: 2, L: 4, // examples 3 (4 tokens) and 1 (5 tokens)
			IDs:     []int32{11, 12, 13, -1, 4, 5, 6, 7},
			Targets: []int32{12, 13, 14, -1, 5, 6, 7, 8},
			Mask:    []float32{1, 1, 1, 0, 1, 1, 1, 1},
			Lengths: []int32{3, 4},
			Rows:    []int{3, 1},
			At:      Position{0, 1}},
	}
	for i, w := range want {
		if got := b.Next(); !reflect.DeepEqual(got, w) {
			t.Errorf("batch %d:\n got %+v\nwant %+v", i, got, w)
		}
	}
	if got := b.Next().At; got != (Position{1, 0}) {
		t.Errorf("after an epoch: at %+v, want {1 0}", got)
	}
}

func TestBatchPadMultiple(t *testing.T) {
	for _, tt := range []struct{ multiple, maxSeq, wantL0, wantL1 int }{
		{4, 10, 4, 4},
		{8, 10, 8, 8},
		{8, 6, 6, 6}, // never past MaxSeqLen
	} {
		b, err := NewBatcher(handExamples(), BatchOptions{BatchSize: 2, MaxSeqLen: tt.maxSeq, PadMultiple: tt.multiple})
		if err != nil {
			t.Fatal(err)
		}
		b0, b1 := b.Next(), b.Next()
		if b0.L != tt.wantL0 || b1.L != tt.wantL1 || len(b0.IDs) != 2*tt.wantL0 {
			t.Errorf("multiple %d, max %d: L %d and %d, want %d and %d", tt.multiple, tt.maxSeq, b0.L, b1.L, tt.wantL0, tt.wantL1)
		}
	}
}

func TestBatchTruncationReported(t *testing.T) {
	examples := append(handExamples(),
		ex([]int32{1, 2, 3, 4, 5}, "00001"), // its only target is cut off
		ex([]int32{7}, "1"),                 // nothing to predict
	)
	b, err := NewBatcher(examples, BatchOptions{BatchSize: 8, MaxSeqLen: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := Truncation{Examples: 3, TokensDropped: 2 + 1 + 2, Longest: 5, NoTargets: 1, TooShort: 1}
	if got := b.Truncation(); got != want {
		t.Errorf("truncation %+v, want %+v", got, want)
	}
	bt := b.Next()
	if bt.B != 4 || bt.L != 2 {
		t.Fatalf("batch %dx%d, want 4x2", bt.B, bt.L)
	}
	// Example 1 cut to its first three tokens.
	for i, r := range bt.Rows {
		if r == 1 && (bt.IDs[i*2] != 4 || bt.IDs[i*2+1] != 5 || bt.Targets[i*2+1] != 6) {
			t.Errorf("example 1 row: ids %v targets %v, want [4 5] [5 6]", bt.IDs[i*2:i*2+2], bt.Targets[i*2:i*2+2])
		}
	}
	if s := b.Truncation().String(); s == "" {
		t.Error("empty truncation summary")
	}
}

func randomExamples(n int) []Example {
	r := rand.New(rand.NewPCG(3, 4))
	out := make([]Example, n)
	for i := range out {
		l := 2 + r.IntN(30)
		toks := make([]int32, l)
		mask := make([]bool, l)
		for j := range toks {
			toks[j] = int32(r.IntN(100))
			mask[j] = j > 0
		}
		out[i] = Example{Tokens: toks, Mask: mask}
	}
	return out
}

func rowsOf(b *Batcher, n int) [][]int {
	var out [][]int
	for range n {
		out = append(out, b.Next().Rows)
	}
	return out
}

func TestBatchShuffleDeterministic(t *testing.T) {
	exs := randomExamples(40)
	opt := BatchOptions{BatchSize: 3, MaxSeqLen: 64, Shuffle: true, Seed: 7}
	b1, _ := NewBatcher(exs, opt)
	b2, _ := NewBatcher(exs, opt)
	n := b1.Len() // 14
	a, c := rowsOf(b1, 3*n), rowsOf(b2, 3*n)
	if !reflect.DeepEqual(a, c) {
		t.Fatal("same seed, different batches")
	}
	if reflect.DeepEqual(a[:n], a[n:2*n]) {
		t.Error("epochs 0 and 1 in the same order")
	}
	// Each epoch hands out every example exactly once.
	for e := range 3 {
		seen := map[int]int{}
		for _, rows := range a[e*n : (e+1)*n] {
			for _, r := range rows {
				seen[r]++
			}
		}
		if len(seen) != len(exs) {
			t.Errorf("epoch %d covers %d examples, want %d", e, len(seen), len(exs))
		}
	}
	opt.Seed = 8
	b3, _ := NewBatcher(exs, opt)
	if reflect.DeepEqual(a[:n], rowsOf(b3, n)) {
		t.Error("seeds 7 and 8 give the same order")
	}
	// Unshuffled: shortest first, the same every epoch.
	b4, _ := NewBatcher(exs, BatchOptions{BatchSize: 3, MaxSeqLen: 64})
	plain := rowsOf(b4, 2*n)
	if !reflect.DeepEqual(plain[:n], plain[n:]) || len(exs[plain[0][0]].Tokens) > len(exs[plain[n-1][0]].Tokens) {
		t.Error("unshuffled order not sorted and fixed")
	}
}

func TestBatchResume(t *testing.T) {
	exs := randomExamples(25)
	opt := BatchOptions{BatchSize: 4, MaxSeqLen: 16, Shuffle: true, Seed: 42}
	run, _ := NewBatcher(exs, opt)
	n := run.Len() // 7 per epoch; resume mid-epoch 1
	rowsOf(run, n+3)
	saved := run.Position()
	if saved != (Position{1, 3}) {
		t.Fatalf("position %+v, want {1 3}", saved)
	}
	var rest []Batch
	for range 2 * n {
		rest = append(rest, run.Next())
	}

	resumed, _ := NewBatcher(exs, opt)
	if err := resumed.Seek(saved); err != nil {
		t.Fatal(err)
	}
	for i, want := range rest {
		if got := resumed.Next(); !reflect.DeepEqual(got, want) {
			t.Fatalf("batch %d after resume: rows %v at %+v, want %v at %+v", i, got.Rows, got.At, want.Rows, want.At)
		}
	}
	// A position at the very end of an epoch rolls into the next.
	if err := resumed.Seek(Position{2, n}); err != nil || resumed.Next().At != (Position{3, 0}) {
		t.Errorf("seek to the end of epoch 2: %v", err)
	}
	for _, p := range []Position{{-1, 0}, {0, -1}, {0, n + 1}} {
		if err := resumed.Seek(p); err == nil {
			t.Errorf("Seek(%+v): no error", p)
		}
	}
}

func TestBatchDropLastAndErrors(t *testing.T) {
	exs := randomExamples(5)
	b, _ := NewBatcher(exs, BatchOptions{BatchSize: 2, MaxSeqLen: 64})
	d, _ := NewBatcher(exs, BatchOptions{BatchSize: 2, MaxSeqLen: 64, DropLast: true})
	if b.Len() != 3 || d.Len() != 2 {
		t.Errorf("Len %d and %d, want 3 and 2 with DropLast", b.Len(), d.Len())
	}
	if _, err := NewBatcher(exs, BatchOptions{BatchSize: 0, MaxSeqLen: 8}); err == nil {
		t.Error("batch size 0: no error")
	}
	if _, err := NewBatcher([]Example{{Tokens: []int32{1, 2}, Mask: []bool{true}}}, BatchOptions{BatchSize: 1, MaxSeqLen: 8}); err == nil {
		t.Error("mask of the wrong length: no error")
	}
	if _, err := NewBatcher([]Example{ex([]int32{1, 2}, "10")}, BatchOptions{BatchSize: 1, MaxSeqLen: 8}); !errors.Is(err, ErrNoExamples) {
		t.Errorf("nothing to learn: got %v, want ErrNoExamples", err)
	}
}
