package optim

import (
	"fmt"
	"math"
)

// Schedule gives the learning rate for a step count: the number of updates applied
// before the one that uses the rate. The first update uses LR(0), as in MLX, whose
// optimizers evaluate their schedule before incrementing the step.
type Schedule interface {
	LR(step int) float32
}

// ScheduleFunc adapts a function to Schedule.
type ScheduleFunc func(step int) float32

func (f ScheduleFunc) LR(step int) float32 { return f(step) }

// Constant is the same rate at every step.
func Constant(lr float32) Schedule {
	return ScheduleFunc(func(int) float32 { return lr })
}

// Linear is mlx.optimizers.linear_schedule: from init at step 0 to end at step
// steps, then end. steps < 1 gives end from the start.
func Linear(init, end float32, steps int) Schedule {
	return ScheduleFunc(func(step int) float32 {
		if steps < 1 {
			return end
		}
		s := float64(min(max(step, 0), steps))
		return float32(s*(float64(end)-float64(init))/float64(steps) + float64(init))
	})
}

// CosineDecay is mlx.optimizers.cosine_decay: half a cosine from init at step 0 to
// end at step decaySteps, then end. decaySteps < 1 gives init throughout.
func CosineDecay(init float32, decaySteps int, end float32) Schedule {
	return ScheduleFunc(func(step int) float32 {
		if decaySteps < 1 {
			return init
		}
		s := float64(min(max(step, 0), decaySteps))
		decay := 0.5 * (1 + math.Cos(math.Pi/float64(decaySteps)*s))
		return float32(float64(end) + decay*(float64(init)-float64(end)))
	})
}

// ExponentialDecay is mlx.optimizers.exponential_decay: init·rate^step.
func ExponentialDecay(init, rate float32) Schedule {
	return ScheduleFunc(func(step int) float32 {
		return float32(float64(init) * math.Pow(float64(rate), float64(max(step, 0))))
	})
}

// StepDecay is mlx.optimizers.step_decay: init·rate^⌊step/every⌋.
func StepDecay(init, rate float32, every int) Schedule {
	every = max(every, 1)
	return ScheduleFunc(func(step int) float32 {
		return float32(float64(init) * math.Pow(float64(rate), float64(max(step, 0)/every)))
	})
}

// Join is mlx.optimizers.join_schedules: schedules[0] until boundaries[0], then
// schedules[1] counting steps from that boundary, and so on. It panics unless
// there is one boundary fewer than schedules.
func Join(schedules []Schedule, boundaries []int) Schedule {
	if len(schedules) == 0 || len(boundaries) != len(schedules)-1 {
		panic(fmt.Sprintf("optim: Join: %d schedules need %d boundaries, got %d", len(schedules), len(schedules)-1, len(boundaries)))
	}
	schedules, boundaries = append([]Schedule(nil), schedules...), append([]int(nil), boundaries...)
	return ScheduleFunc(func(step int) float32 {
		lr := schedules[0].LR(step)
		for i, b := range boundaries {
			if step >= b {
				lr = schedules[i+1].LR(step - b)
			}
		}
		return lr
	})
}

// WarmupCosine is mlx-lm's warmup + cosine schedule: a linear warmup from 0 to
// peak over warmup steps, then a cosine decay from peak to end (the floor) over
// decaySteps, then end. The learning rate does not decay during warmup.
//
// It keeps mlx-lm's boundary exactly (join_schedules at warmup+1), so the peak is
// held for two steps: LR(warmup) = LR(warmup+1) = peak, and the floor is reached
// at step warmup+1+decaySteps. A run of N updates that passes decaySteps = N −
// warmup therefore ends one step short of the floor, as mlx-lm's does.
func WarmupCosine(peak float32, warmup, decaySteps int, end float32) Schedule {
	cos := CosineDecay(peak, decaySteps, end)
	if warmup <= 0 {
		return cos
	}
	return Join([]Schedule{Linear(0, peak, warmup), cos}, []int{warmup + 1})
}

// ScheduleConfig is mlx-lm's lr_schedule setting, so a schedule written for
// mlx_lm.lora works here unchanged, e.g.
//
//	{"name": "cosine_decay", "arguments": [1e-5, 1000, 1e-7], "warmup": 100}
//
// Name is one of mlx.optimizers' schedules (cosine_decay, linear_schedule,
// exponential_decay, step_decay) or constant, with that function's arguments, the
// first being the initial rate. A warmup of W steps from WarmupInit is joined in
// front at step W+1, as mlx-lm does.
type ScheduleConfig struct {
	Name       string    `json:"name"`
	Arguments  []float64 `json:"arguments"`
	Warmup     int       `json:"warmup,omitempty"`
	WarmupInit float64   `json:"warmup_init,omitempty"`
}

// Build checks the configuration and returns its schedule.
func (c ScheduleConfig) Build() (Schedule, error) {
	args := c.Arguments
	nargs := func(lo, hi int) error {
		if len(args) < lo || len(args) > hi {
			return fmt.Errorf("optim: schedule %s takes %d to %d arguments, got %d", c.Name, lo, hi, len(args))
		}
		for _, a := range args {
			if math.IsNaN(a) || math.IsInf(a, 0) {
				return fmt.Errorf("optim: schedule %s: argument %v is not finite", c.Name, a)
			}
		}
		return nil
	}
	count := func(i int) (int, error) {
		v := args[i]
		if v < 1 || v != math.Trunc(v) || v > math.MaxInt32 {
			return 0, fmt.Errorf("optim: schedule %s: argument %d is %v, want a step count ≥ 1", c.Name, i+1, v)
		}
		return int(v), nil
	}
	var s Schedule
	switch c.Name {
	case "constant":
		if err := nargs(1, 1); err != nil {
			return nil, err
		}
		s = Constant(float32(args[0]))
	case "cosine_decay":
		if err := nargs(2, 3); err != nil {
			return nil, err
		}
		n, err := count(1)
		if err != nil {
			return nil, err
		}
		end := 0.0
		if len(args) == 3 {
			end = args[2]
		}
		s = CosineDecay(float32(args[0]), n, float32(end))
	case "linear_schedule":
		if err := nargs(3, 3); err != nil {
			return nil, err
		}
		n, err := count(2)
		if err != nil {
			return nil, err
		}
		s = Linear(float32(args[0]), float32(args[1]), n)
	case "exponential_decay":
		if err := nargs(2, 2); err != nil {
			return nil, err
		}
		s = ExponentialDecay(float32(args[0]), float32(args[1]))
	case "step_decay":
		if err := nargs(3, 3); err != nil {
			return nil, err
		}
		n, err := count(2)
		if err != nil {
			return nil, err
		}
		s = StepDecay(float32(args[0]), float32(args[1]), n)
	default:
		return nil, fmt.Errorf("optim: unknown schedule %q (want constant, cosine_decay, linear_schedule, exponential_decay or step_decay)", c.Name)
	}
	if c.Warmup < 0 {
		return nil, fmt.Errorf("optim: schedule %s: warmup %d < 0", c.Name, c.Warmup)
	}
	if c.Warmup == 0 {
		return s, nil
	}
	warm := Linear(float32(c.WarmupInit), float32(args[0]), c.Warmup)
	return Join([]Schedule{warm, s}, []int{c.Warmup + 1}), nil
}
