package tao

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestChecks(t *testing.T) {
	var ws []string
	for i := range 90 {
		ws = append(ws, fmt.Sprintf("w%d", i))
	}
	long := strings.Join(ws, " ")
	loop := strings.Repeat("the same three ", 10)
	for _, c := range []struct {
		name string
		item Item
		want float64
	}{
		{"empty", Item{Answer: "", Finished: true}, 0},
		{"punctuation only", Item{Answer: "... !!", Finished: true}, 0},
		{"good", Item{Answer: "A hacker enjoys clever solutions.", Finished: true}, 1},
		{"cut off", Item{Answer: "A hacker enjoys clever solutions.", Finished: false}, 0.5},
		{"short", Item{Answer: "Yes.", Finished: true}, 0.5},      // 1 of MinWords 2
		{"long", Item{Answer: long, Finished: true}, 0.5},         // 90 words: halfway from 60 to 120
		{"loop", Item{Answer: loop, Finished: true}, 1 - 25.0/28}, // 3 distinct trigrams of 28
	} {
		got, err := Checks{MinWords: 2}.Score(context.Background(), []Item{c.item})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got[0]-c.want) > 1e-9 {
			t.Errorf("%s: %v, want %v", c.name, got[0], c.want)
		}
	}
	if _, err := (Checks{MinWords: 10, MaxWords: 5}).Score(context.Background(), nil); err == nil {
		t.Error("max words below min words: no error")
	}
}

func TestRepetition(t *testing.T) {
	for _, c := range []struct {
		text string
		want float64
	}{
		{"", 0}, {"a b", 0}, {"a b c d e", 0},
		{"a b c a b c", 1.0 / 4}, // trigrams abc bca cab abc: the last repeats
		{"x x x x x x", 3.0 / 4},
	} {
		if got := Repetition(words(c.text)); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Repetition(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}

func TestFormat(t *testing.T) {
	f, err := NewFormat(attribution)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := f.Score(context.Background(), []Item{
		{Answer: "Life is short.\n  -- Mark Twain"},
		{Answer: "Life is short.\n  -- Mark Twain\nand more"},
		{Answer: "Life is short -- Mark Twain"},
	})
	if got[0] != 1 || got[1] != 0 || got[2] != 0 {
		t.Errorf("format scores %v, want [1 0 0]", got)
	}
	if _, err := NewFormat("(unclosed"); err == nil {
		t.Error("a broken pattern: no error")
	}
}

// scripted is a reward that returns given scores.
type scripted struct {
	name string
	s    []float64
}

func (r scripted) Name() string                                     { return r.name }
func (r scripted) Score(context.Context, []Item) ([]float64, error) { return r.s, nil }

func TestCombined(t *testing.T) {
	items := make([]Item, 2)
	c := &Combined{Parts: []Part{{scripted{"a", []float64{1, 0}}, 3}, {scripted{"b", []float64{0, 0.5}}, 1}, {scripted{"c", []float64{2, 2}}, 0}}}
	total, parts, err := c.ScoreParts(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(total[0]-0.75) > 1e-12 || math.Abs(total[1]-0.125) > 1e-12 || len(parts) != 2 {
		t.Errorf("combined %v (parts %v), want [0.75 0.125] from two parts", total, parts)
	}
	if name := c.Name(); name != "3×a + 1×b" {
		t.Errorf("name %q", name)
	}
	for _, bad := range []*Combined{
		{Parts: []Part{{scripted{"a", []float64{1.5, 0}}, 1}}}, // out of [0, 1]
		{Parts: []Part{{scripted{"a", []float64{1}}, 1}}},      // too few scores
		{Parts: []Part{{scripted{"a", []float64{1, 1}}, 0}}},   // no weight
		{Parts: []Part{{scripted{"a", []float64{1, 1}}, math.NaN()}}},
	} {
		if _, err := bad.Score(context.Background(), items); err == nil {
			t.Errorf("%s: no error", bad.Name())
		}
	}
	if n := NewCombined(nil, nil, Checks{}).Name(); n != "checks" {
		t.Errorf("checks alone: %q", n)
	}
}
