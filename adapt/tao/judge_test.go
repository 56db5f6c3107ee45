package tao

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/inloop/inloop/inference/inferencetest"
	"github.com/inloop/inloop/training/decide"
)

// fortunes are answers in the demo model's style; ratedHistory rates those
// ending with an attribution up and the rest down, as a person who wants
// attributions would.
var fortunes = []string{
	"A hacker is a person who enjoys clever solutions.",
	"Never trust a program you cannot read.",
	"The bazaar is open all night and the bugs are shallow.",
	"A kludge works, and nobody knows why.",
	"Real programmers do not comment their code.",
	"There is no place like home directory.",
	"The net interprets censorship as damage.",
	"A wizard knows where the bodies are buried.",
	"Every program has at least one bug.",
	"Unix is simple, but it takes a genius to understand it.",
	"The source is with you, always.",
	"A guru can explain anything except the thing you asked.",
}

var names = []string{"Mark Twain", "Wm. Shakespeare", "Ambrose Bierce", "Oscar Wilde"}

func ratedHistory(n int) []Rated {
	var out []Rated
	for i := range n {
		a := fortunes[i%len(fortunes)]
		r := Rated{Prompt: demoPrompts()[i%80], Answer: a, Thumb: -1}
		if i%2 == 0 {
			r.Answer, r.Thumb = a+"\n  -- "+names[i%len(names)], 1
		} else if i%4 == 1 {
			r.Correction = a + "\n  -- " + names[(i+1)%len(names)]
		}
		out = append(out, r)
	}
	return out
}

func TestJudgeRows(t *testing.T) {
	rows := JudgeRows([]Rated{
		{Prompt: "p", Answer: "good", Thumb: 1},
		{Prompt: "p", Answer: "bad", Thumb: -1, Correction: "better"},
		{Prompt: "p", Answer: "unrated"},
	})
	q := JudgeTask().Questions[0]
	yes, no := q.OptionIndex("yes"), q.OptionIndex("no")
	want := []struct {
		state string
		label int
	}{{JudgeState("p", "good"), yes}, {JudgeState("p", "bad"), no}, {JudgeState("p", "better"), yes}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		if rows[i].State != w.state || rows[i].Labels[0] != w.label {
			t.Errorf("row %d: %q %v, want %q %d", i, rows[i].State, rows[i].Labels, w.state, w.label)
		}
	}
}

// TestJudgeLearnsFromThumbs trains a judge on a thumbs history and checks
// that it prefers new answers of the kind people rated up.
func TestJudgeLearnsFromThumbs(t *testing.T) {
	m, _, tok := demo(t)
	ctx := context.Background()
	if _, _, err := TrainJudge(ctx, m, tok, ratedHistory(4), decide.Options{}, nil); !errors.Is(err, ErrTooFewRatings) {
		t.Fatalf("4 ratings: %v, want ErrTooFewRatings", err)
	}
	dm, res, err := TrainJudge(ctx, m, tok, ratedHistory(16), decide.Options{HeadOnly: true, Epochs: 6, MaxSeqLength: 128, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j, err := NewJudge(dm, "")
	if err != nil {
		t.Fatal(err)
	}
	var items []Item
	for i := range 8 { // prompts and names it was not trained with
		a := fmt.Sprintf("%s Then %d of them went home.", fortunes[(i+5)%len(fortunes)], i+2)
		items = append(items, Item{Prompt: demoPrompts()[79-i], Answer: a + "\n  -- Lewis Carroll"}, Item{Prompt: demoPrompts()[79-i], Answer: a})
	}
	s, err := j.Score(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	var good, bad float64
	for i, v := range s {
		if i%2 == 0 {
			good += v / 8
		} else {
			bad += v / 8
		}
	}
	t.Logf("judge after %d steps: P(good) %.3f for attributed answers, %.3f for the others", res.Steps, good, bad)
	if !(good > bad+0.2) {
		t.Errorf("P(good) %.3f for answers of the kind rated up, %.3f for the others; want a clear preference", good, bad)
	}
	if _, err := NewJudge(dm, "nonesuch"); err == nil {
		t.Error("a question the task lacks: no error")
	}
}

func TestHistory(t *testing.T) {
	m, tok := inferencetest.Load(t, inferencetest.Dir(t))
	ctx := context.Background()
	if _, err := NewHistory(ctx, m, tok, nil, 0); !errors.Is(err, ErrTooFewRatings) {
		t.Fatalf("no ratings: %v, want ErrTooFewRatings", err)
	}
	rated := []Rated{
		{Answer: "the cat sat on the mat", Thumb: 1},
		{Answer: "ZZZZ 9999 %%%% ZZZZ 9999", Thumb: -1, Correction: "the dog sat on the rug"},
	}
	h, err := NewHistory(ctx, m, tok, rated, 2)
	if err != nil {
		t.Fatal(err)
	}
	if h.Len() != 3 {
		t.Fatalf("%d rated answers held, want 3 (the correction counts as a good one)", h.Len())
	}
	s, err := h.Score(ctx, []Item{{Answer: "the cat sat on the mat"}, {Answer: "ZZZZ 9999 %%%% ZZZZ 9999"}, {Answer: ""}})
	if err != nil {
		t.Fatal(err)
	}
	if !(s[0] > s[1]) || s[2] != 0.5 {
		t.Errorf("scores %v: want a rated-up answer above a rated-down one, and 0.5 for an empty one", s)
	}
	for _, v := range s {
		if !(v >= 0 && v <= 1) {
			t.Errorf("score %v outside [0, 1]", v)
		}
	}
}
