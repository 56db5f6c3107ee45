package inference

import (
	"math"
	"sync"

	mx "github.com/inloop/inloop/mlxbridge"
)

// llama3Freqs are the periods of llama3's rope_scaling, made the way mlx-lm's
// Llama3RoPE makes them — the same float32 operations in the same order, on the
// model's backend — and handed to the backend's RoPE as MLX's fast.rope takes
// them. On MLX they are then the very numbers mlx-lm uses, so the rotation is
// bit for bit mlx-lm's; Config.RopeFrequencies has the float64 ones.
type llama3Freqs struct {
	dims                                int
	base, factor, lowFactor, highFactor float64
	oldContext                          int

	once  sync.Once
	freqs *mx.Array // (dims/2)
}

func newLlama3Freqs(cfg *Config) *llama3Freqs {
	r := cfg.RopeScaling
	return &llama3Freqs{dims: cfg.Head(), base: cfg.RopeTheta, factor: r.Factor, lowFactor: r.LowFreqFactor,
		highFactor: r.HighFreqFactor, oldContext: r.OriginalMaxPositionEmbeddings}
}

// on returns the periods as an array of b, computed once (a model's arrays all
// live on one backend).
func (f *llama3Freqs) on(b mx.Backend) *mx.Array {
	f.once.Do(func() { f.freqs = f.compute(b) })
	return f.freqs
}

// compute follows mlx_lm/models/rope_utils.py Llama3RoPE.__init__; each Python
// float meets a float32 array as a float32 scalar.
func (f *llama3Freqs) compute(b mx.Backend) *mx.Array {
	half := f.dims / 2
	k := func(v float64) *mx.Array { return mx.FromData(b, mx.Float32, []float32{float32(v)}) }
	steps := make([]float32, half) // mx.arange(0, dims, 2) / dims: int32 divided in float32
	for i := range steps {
		steps[i] = float32(2*i) / float32(f.dims)
	}
	freqs := mx.Power(k(f.base), mx.FromData(b, mx.Float32, steps, half))
	wavelens := mx.Mul(k(2*math.Pi), freqs)
	lowWave := float64(f.oldContext) / f.lowFactor
	highWave := float64(f.oldContext) / f.highFactor
	freqs = mx.Where(mx.Greater(wavelens, k(lowWave)), mx.Mul(freqs, k(f.factor)), freqs)
	smooth := mx.Div(mx.Sub(mx.Div(k(float64(f.oldContext)), wavelens), k(f.lowFactor)), k(f.highFactor-f.lowFactor))
	smoothFreqs := mx.Div(freqs, mx.Add(mx.Div(mx.Sub(k(1), smooth), k(f.factor)), smooth))
	// where((wavelens > high) & (wavelens < low), smooth_freqs, freqs)
	return mx.Where(mx.Greater(wavelens, k(highWave)), mx.Where(mx.Less(wavelens, k(lowWave)), smoothFreqs, freqs), freqs)
}
