package tao

import (
	"fmt"
	"math"
)

// Check is the held-out reward check: the same held-out prompts answered
// with the same seeds before and after training, scored by the same reward.
type Check struct {
	Before float64 `json:"before"` // mean reward of the held-out answers before training
	After  float64 `json:"after"`  // and after
	// Gain is After − Before; StdErr the standard error of the mean of the
	// per-prompt differences (the prompts are the independent units; a
	// prompt's samples share it).
	Gain    float64 `json:"gain"`
	StdErr  float64 `json:"std_err"`
	Prompts int     `json:"prompts"`
	Samples int     `json:"samples"` // answers per prompt
	// Improved: Gain > MinGain and Gain > Z·StdErr.
	Improved bool   `json:"improved"`
	Reason   string `json:"reason"`
}

// compare decides whether after (per prompt, per sample) improves on before.
// A gain must clear both a floor (minGain: a change too small to be worth a
// new version) and z standard errors (a change the sampling noise would not
// make: with a reward that knows nothing, one round in ~40 passes at z = 2).
func compare(before, after [][]float64, minGain, z float64) Check {
	c := Check{Prompts: len(before)}
	if len(before) == 0 {
		c.Reason = "no held-out prompts"
		return c
	}
	c.Samples = len(before[0])
	diffs := make([]float64, len(before))
	var sb, sa, n float64
	for p := range before {
		var d float64
		for j := range before[p] {
			sb += before[p][j]
			sa += after[p][j]
			d += after[p][j] - before[p][j]
			n++
		}
		diffs[p] = d / float64(len(before[p]))
	}
	c.Before, c.After = sb/n, sa/n
	var mean float64
	for _, d := range diffs {
		mean += d
	}
	mean /= float64(len(diffs))
	c.Gain = mean
	if len(diffs) > 1 {
		var ss float64
		for _, d := range diffs {
			ss += (d - mean) * (d - mean)
		}
		c.StdErr = math.Sqrt(ss / float64(len(diffs)-1) / float64(len(diffs)))
	}
	switch {
	case !(c.Gain > minGain):
		c.Reason = fmt.Sprintf("the held-out reward went from %.3f to %.3f: a gain of %+.3f is not above the %.3f required", c.Before, c.After, c.Gain, minGain)
	case !(c.Gain > z*c.StdErr):
		c.Reason = fmt.Sprintf("the held-out reward went from %.3f to %.3f, but the gain %+.3f is within %.3g standard errors (%.3f) of no change", c.Before, c.After, c.Gain, z, c.StdErr)
	default:
		c.Improved = true
		c.Reason = fmt.Sprintf("the held-out reward rose from %.3f to %.3f (%+.3f, %.1f standard errors)", c.Before, c.After, c.Gain, c.Gain/max(c.StdErr, 1e-12))
	}
	return c
}
