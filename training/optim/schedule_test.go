package optim

import (
	"encoding/json"
	"math"
	"testing"
)

func TestSchedules(t *testing.T) {
	cases := []struct {
		name string
		s    Schedule
		at   map[int]float64
	}{
		{"constant", Constant(3e-4), map[int]float64{0: 3e-4, 1000: 3e-4}},
		{"linear", Linear(0, 1e-3, 10), map[int]float64{0: 0, 5: 5e-4, 10: 1e-3, 11: 1e-3, 1 << 30: 1e-3}},
		// 1e-5 + ½(1+cos(π·s/100))·(1e-3 − 1e-5): peak at 0, midpoint at 50, floor from 100 on.
		{"cosine", CosineDecay(1e-3, 100, 1e-5), map[int]float64{0: 1e-3, 50: 5.05e-4, 100: 1e-5, 500: 1e-5}},
		{"cosine no floor", CosineDecay(1e-3, 100, 0), map[int]float64{25: 1e-3 * (1 + math.Sqrt2/2) / 2, 100: 0}},
		// mlx-lm: warmup 0 → 1e-3 over 10 steps, cosine joined at step 11.
		{"warmup cosine", WarmupCosine(1e-3, 10, 90, 1e-5), map[int]float64{
			0: 0, 1: 1e-4, 9: 9e-4, 10: 1e-3, // warmup end: the peak
			11:  1e-3,                   // cosine step 0: still the peak, no decay yet
			56:  1e-5 + 0.5*(1e-3-1e-5), // halfway through the decay
			101: 1e-5, 1000: 1e-5,       // the floor
		}},
		{"warmup 0", WarmupCosine(1e-3, 0, 10, 0), map[int]float64{0: 1e-3, 10: 0}},
		{"exponential", ExponentialDecay(0.1, 0.9), map[int]float64{0: 0.1, 5: 0.1 * math.Pow(0.9, 5)}},
		{"step", StepDecay(0.1, 0.9, 10), map[int]float64{9: 0.1, 10: 0.09, 21: 0.081}},
		{"join", Join([]Schedule{Constant(1), Constant(2), Linear(3, 4, 2)}, []int{5, 7}), map[int]float64{4: 1, 5: 2, 6: 2, 7: 3, 8: 3.5, 9: 4}},
	}
	for _, c := range cases {
		for step, want := range c.at {
			if got := c.s.LR(step); math.Abs(float64(got)-want) > 1e-6*math.Max(want, 1e-3) {
				t.Errorf("%s: LR(%d) = %.9g, want %.9g", c.name, step, got, want)
			}
		}
	}
}

// WarmupCosine never decays during warmup: the rate rises monotonically to the
// peak and only then falls monotonically to the floor.
func TestWarmupCosineShape(t *testing.T) {
	s := WarmupCosine(2e-4, 50, 450, 2e-6)
	prev := float32(-1)
	for step := 0; step <= 51; step++ {
		if lr := s.LR(step); lr < prev || lr > 2e-4 {
			t.Fatalf("warmup: LR(%d) = %g after %g", step, lr, prev)
		} else {
			prev = lr
		}
	}
	for step := 52; step <= 600; step++ {
		if lr := s.LR(step); lr > prev || lr < 2e-6 {
			t.Fatalf("decay: LR(%d) = %g after %g", step, lr, prev)
		} else {
			prev = lr
		}
	}
}

func TestScheduleConfig(t *testing.T) {
	var c ScheduleConfig
	if err := json.Unmarshal([]byte(`{"name": "cosine_decay", "arguments": [1e-3, 90, 1e-5], "warmup": 10}`), &c); err != nil {
		t.Fatal(err)
	}
	s, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	ref := WarmupCosine(1e-3, 10, 90, 1e-5)
	for step := range 120 {
		if s.LR(step) != ref.LR(step) {
			t.Fatalf("LR(%d) = %g, want %g", step, s.LR(step), ref.LR(step))
		}
	}
	c.WarmupInit = 1e-7
	s, _ = c.Build()
	if got := s.LR(0); got != 1e-7 {
		t.Errorf("warmup_init: LR(0) = %g, want 1e-7", got)
	}
	for _, bad := range []ScheduleConfig{
		{Name: "cosine_decay", Arguments: []float64{1e-3}},
		{Name: "cosine_decay", Arguments: []float64{1e-3, 0.5}},
		{Name: "linear_schedule", Arguments: []float64{0, 1, 0}},
		{Name: "constant", Arguments: []float64{math.NaN()}},
		{Name: "cosine", Arguments: []float64{1e-3, 10}},
		{Name: "constant", Arguments: []float64{1}, Warmup: -1},
	} {
		if _, err := bad.Build(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
