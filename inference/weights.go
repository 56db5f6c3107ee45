package inference

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/quant"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// Loading is a name match. A module field carries its checkpoint name in a `tensor`
// struct tag, relative to its parent ("self_attn", then "q_proj"); nested structs
// extend the path with a dot. A Linear at path P reads P.weight, and P.scales and
// P.biases when the checkpoint has them (MLX quantization), and P.bias if present
// (required when HasBias). An Embedding reads the same minus the bias; an RMSNorm
// reads P.weight. Every shape is checked against the config before any data is read.

var (
	// ErrMissingTensor reports a tensor the architecture needs and the checkpoint lacks.
	ErrMissingTensor = errors.New("inference: missing tensor")
	// ErrTensorShape reports a tensor whose shape or dtype disagrees with config.json.
	ErrTensorShape = errors.New("inference: tensor does not fit the config")
	// ErrNonFinite reports a checkpoint tensor holding a NaN or an infinity.
	ErrNonFinite = errors.New("inference: weights are not finite")
)

// source supplies a model's tensors by name.
type source interface {
	has(name string) bool
	// load returns the named tensor, which must have the given shape.
	load(name string, shape []int) (*mx.Array, error)
}

// shaper is a source that can tell a tensor's shape without loading it.
type shaper interface {
	shape(name string) ([]int, bool)
}

// binder fills modules from a source and records which tensors it used.
type binder struct {
	src  source
	cfg  *Config
	used map[string]bool
}

func newBinder(src source, cfg *Config) *binder {
	return &binder{src: src, cfg: cfg, used: map[string]bool{}}
}

func (b *binder) tensor(name string, shape []int, want func(mx.DType) bool, what string) (*mx.Array, error) {
	a, err := b.src.load(name, shape)
	if err != nil {
		return nil, err
	}
	if err := a.Err(); err != nil {
		return nil, fmt.Errorf("inference: %s: %w", name, err)
	}
	if !slices.Equal(a.Shape(), shape) {
		return nil, fmt.Errorf("%w: %s has shape %v, want %v", ErrTensorShape, name, a.Shape(), shape)
	}
	if !want(a.DType()) {
		return nil, fmt.Errorf("%w: %s is %s, want %s", ErrTensorShape, name, a.DType(), what)
	}
	b.used[name] = true
	return a, nil
}

func isFloat(d mx.DType) bool  { return d.IsFloat() }
func isUint32(d mx.DType) bool { return d == mx.Uint32 }

// quantized loads path.weight/.scales/.biases for an (out, in) matrix when the
// checkpoint quantized it, and reports whether it did.
func (b *binder) quantized(path string, out, in int) (w, s, bs *mx.Array, p QuantParams, ok bool, err error) {
	if !b.src.has(path + ".scales") {
		return nil, nil, nil, p, false, nil
	}
	alts := b.cfg.Quantization.alternatives(path)
	if len(alts) == 0 {
		return nil, nil, nil, p, false, fmt.Errorf("%w: %s.scales is present but config.json does not quantize %s", ErrTensorShape, path, path)
	}
	p = alts[0]
	if err := checkMode(path, p.Mode); err != nil {
		return nil, nil, nil, p, false, err
	}
	// Where the config left a field null, the reading whose shapes the stored
	// tensors have wins (both are what some mlx-lm version would write).
	for _, a := range alts[1:] {
		if !b.fits(path, out, in, p) && b.fits(path, out, in, a) {
			p = a
		}
	}
	if in%p.GroupSize != 0 || in*p.Bits%32 != 0 {
		return nil, nil, nil, p, false, fmt.Errorf("%w: %s: input size %d does not fit %d-bit groups of %d", ErrTensorShape, path, in, p.Bits, p.GroupSize)
	}
	if w, err = b.tensor(path+".weight", []int{out, quant.PackedLen(in, p.Bits)}, isUint32, "uint32 (packed)"); err != nil {
		return
	}
	if s, err = b.tensor(path+".scales", []int{out, in / p.GroupSize}, isFloat, "a float type"); err != nil {
		return
	}
	bs, err = b.tensor(path+".biases", []int{out, in / p.GroupSize}, isFloat, "a float type")
	return w, s, bs, p, true, err
}

// fits reports whether the stored packed weight and scales of path have the shapes
// quantization p gives an (out, in) matrix. A source that cannot tell says yes.
func (b *binder) fits(path string, out, in int, p QuantParams) bool {
	sh, ok := b.src.(shaper)
	if !ok {
		return true
	}
	if p.GroupSize <= 0 || in%p.GroupSize != 0 || in*p.Bits%32 != 0 {
		return false
	}
	w, okW := sh.shape(path + ".weight")
	s, okS := sh.shape(path + ".scales")
	return okW && okS && slices.Equal(w, []int{out, quant.PackedLen(in, p.Bits)}) && slices.Equal(s, []int{out, in / p.GroupSize})
}

func (b *binder) linear(path string, l *Linear) error {
	w, s, bs, p, q, err := b.quantized(path, l.Out, l.In)
	if err != nil {
		return err
	}
	if q {
		l.Weight, l.Scales, l.Biases, l.GroupSize, l.Bits = w, s, bs, p.GroupSize, p.Bits
	} else if l.Weight, err = b.tensor(path+".weight", []int{l.Out, l.In}, isFloat, "a float type"); err != nil {
		return err
	}
	if l.HasBias || b.src.has(path+".bias") {
		if l.Bias, err = b.tensor(path+".bias", []int{l.Out}, isFloat, "a float type"); err != nil {
			return err
		}
	}
	return nil
}

func (b *binder) embedding(path string, e *Embedding) error {
	w, s, bs, p, q, err := b.quantized(path, e.Vocab, e.Dim)
	if err != nil {
		return err
	}
	if q {
		e.Weight, e.Scales, e.Biases, e.GroupSize, e.Bits = w, s, bs, p.GroupSize, p.Bits
		e.dtype = s.DType()
		return nil
	}
	e.Weight, err = b.tensor(path+".weight", []int{e.Vocab, e.Dim}, isFloat, "a float type")
	if err == nil {
		e.dtype = e.Weight.DType()
	}
	return err
}

func (b *binder) norm(path string, n *RMSNorm) error {
	var err error
	n.Weight, err = b.tensor(path+".weight", []int{n.Dim}, isFloat, "a float type")
	return err
}

var (
	linearType    = reflect.TypeFor[*Linear]()
	embeddingType = reflect.TypeFor[*Embedding]()
	normType      = reflect.TypeFor[*RMSNorm]()
)

// bind fills every tagged module in the struct *v, whose fields' tags are relative to
// prefix (which ends in a dot, or is empty).
func (b *binder) bind(prefix string, v any) error {
	return walk(prefix, reflect.ValueOf(v), func(path string, f reflect.Value) error {
		switch m := f.Interface().(type) {
		case *Linear:
			return b.linear(path, m)
		case *Embedding:
			return b.embedding(path, m)
		case *RMSNorm:
			return b.norm(path, m)
		}
		return nil
	})
}

// walk calls fn on every module field (a *Linear, *Embedding or *RMSNorm with a
// `tensor` tag) of the struct v points to, recursing into tagged nested structs.
// Architectures allocate their modules (with the sizes they expect) before binding.
func walk(prefix string, v reflect.Value, fn func(path string, f reflect.Value) error) error {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag, ok := t.Field(i).Tag.Lookup("tensor")
		if !ok {
			continue
		}
		f := v.Field(i)
		path := prefix + tag
		switch f.Type() {
		case linearType, embeddingType, normType:
			if f.IsNil() {
				continue // a module this configuration does not have
			}
			if err := fn(path, f); err != nil {
				return err
			}
		default:
			if err := walk(path+".", f, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// slots lists the tensors of every module in v by full name, as pointers to the fields
// that hold them, for Params and WithParams.
func slots(prefix string, v any, add func(name string, slot **mx.Array)) {
	walk(prefix, reflect.ValueOf(v), func(path string, f reflect.Value) error {
		switch m := f.Interface().(type) {
		case *Linear:
			add(path+".weight", &m.Weight)
			if m.Bias != nil {
				add(path+".bias", &m.Bias)
			}
			if m.quantized() {
				add(path+".scales", &m.Scales)
				add(path+".biases", &m.Biases)
			}
		case *Embedding:
			add(path+".weight", &m.Weight)
			if m.quantized() {
				add(path+".scales", &m.Scales)
				add(path+".biases", &m.Biases)
			}
		case *RMSNorm:
			add(path+".weight", &m.Weight)
		}
		return nil
	})
}

// dirSource reads a checkpoint folder's safetensors. Float tensors become dtype
// unless keep is set (see LoadOptions).
type dirSource struct {
	set     *safetensors.Set
	dir     string
	b       mx.Backend
	keep    bool
	dtype   mx.DType
	compact bool          // keep 16-bit weight matrices compact (LoadOptions.DType)
	quant   *Quantization // the bits of each quantized matrix, whose scales may stay compact (keptCompact)
}

func (d *dirSource) has(name string) bool {
	_, ok := d.set.Info(name)
	return ok
}

func (d *dirSource) shape(name string) ([]int, bool) {
	info, ok := d.set.Info(name)
	return info.Shape, ok
}

func (d *dirSource) load(name string, shape []int) (*mx.Array, error) {
	info, ok := d.set.Info(name)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not in %s", ErrMissingTensor, name, d.dir)
	}
	if !slices.Equal(info.Shape, shape) {
		return nil, fmt.Errorf("%w: %s has shape %v in %s, want %v", ErrTensorShape, name, info.Shape, d.dir, shape)
	}
	// A NaN or an infinity in the weights would spread through every
	// activation; it is cheaper to find here, while the bytes are read
	// anyway, than from a nonsense reply or a NaN loss later.
	if raw, err := d.set.Data(name); err != nil {
		return nil, fmt.Errorf("inference: %w", err)
	} else if i := firstNonFinite(info.DType, raw); i >= 0 {
		return nil, fmt.Errorf("%w: tensor %q holds %s at element %d (of %d) in %s",
			ErrNonFinite, name, nonFiniteText(info.DType, raw, i), i, info.NumElements(), d.dir)
	}
	load, matrix := mx.LoadTensor, d.compact && keptCompact(name, len(shape), d.quant, d.b)
	if matrix {
		load = mx.LoadTensorCompact // a 16-bit matrix straight into compact storage
	}
	a, err := load(d.b, d.set, name)
	if err != nil {
		return nil, fmt.Errorf("inference: %w", err)
	}
	compact := matrix && (a.DType() == mx.BFloat16 || a.DType() == mx.Float16)
	if !compact && !d.keep && a.DType().IsFloat() && a.DType() != d.dtype {
		a = mx.AsType(a, d.dtype)
	}
	return a, a.Err()
}

// firstNonFinite returns the index of the first NaN or infinity in raw, a
// little-endian float tensor of dtype dt, or -1 (also for integer dtypes). It
// tests the exponent bits of four 16-bit or two 32-bit values per 64-bit
// word, so it runs at memory speed.
func firstNonFinite(dt safetensors.DType, raw []byte) int {
	switch dt {
	case safetensors.DTypeF32:
		return firstAllOnes(raw, 4, 0x7f800000)
	case safetensors.DTypeBF16:
		return firstAllOnes(raw, 2, 0x7f80)
	case safetensors.DTypeF16:
		return firstAllOnes(raw, 2, 0x7c00)
	case safetensors.DTypeF64:
		return firstAllOnes(raw, 8, 0x7ff0000000000000)
	case safetensors.DTypeF8E5M2:
		return firstAllOnes(raw, 1, 0x7c)
	case safetensors.DTypeF8E4M3: // no infinities; NaN is S.1111.111
		for i, c := range raw {
			if c&0x7f == 0x7f {
				return i
			}
		}
	}
	return -1
}

// firstAllOnes finds the first size-byte lane of raw whose bits under exp
// are all set.
func firstAllOnes(raw []byte, size int, exp uint64) int {
	var mask, lows, highs uint64 // exp in every lane; each lane's lowest and highest bit
	for shift := 0; shift < 64; shift += 8 * size {
		mask |= exp << shift
		lows |= 1 << shift
		highs |= 1 << (shift + 8*size - 1)
	}
	// A lane is zero in y exactly where its exponent is all ones; the
	// exponent never reaches a lane's sign bit, so the classic has-zero-lane
	// test is exact. Four words at a time, then the block with a hit lane by
	// lane.
	hit := func(w uint64) uint64 {
		y := w&mask ^ mask
		return (y - lows) &^ y & highs
	}
	i := 0
	for ; i+32 <= len(raw); i += 32 {
		b := raw[i : i+32 : i+32]
		if hit(binary.LittleEndian.Uint64(b[0:8]))|hit(binary.LittleEndian.Uint64(b[8:16]))|
			hit(binary.LittleEndian.Uint64(b[16:24]))|hit(binary.LittleEndian.Uint64(b[24:32])) != 0 {
			break
		}
	}
	for ; i+size <= len(raw); i += size {
		var v uint64
		for k := size - 1; k >= 0; k-- {
			v = v<<8 | uint64(raw[i+k])
		}
		if v&exp == exp {
			return i / size
		}
	}
	return -1
}

// nonFiniteText says what element i of raw is: NaN, +Inf or -Inf.
func nonFiniteText(dt safetensors.DType, raw []byte, i int) string {
	size := dt.Size()
	var v uint64
	for k := size - 1; k >= 0; k-- {
		v = v<<8 | uint64(raw[i*size+k])
	}
	mant := map[safetensors.DType]uint64{safetensors.DTypeF32: 0x7fffff, safetensors.DTypeBF16: 0x7f,
		safetensors.DTypeF16: 0x3ff, safetensors.DTypeF64: 0xfffffffffffff, safetensors.DTypeF8E5M2: 0x3}[dt]
	switch {
	case dt == safetensors.DTypeF8E4M3 || v&mant != 0:
		return "NaN"
	case v>>(8*size-1) != 0:
		return "-Inf"
	}
	return "+Inf"
}

// mapSource supplies tensors from a map (WithParams).
type mapSource map[string]*mx.Array

func (m mapSource) has(name string) bool { return m[name] != nil }

func (m mapSource) shape(name string) ([]int, bool) {
	if a := m[name]; a != nil {
		return a.Shape(), true
	}
	return nil, false
}

func (m mapSource) load(name string, shape []int) (*mx.Array, error) {
	a := m[name]
	if a == nil {
		return nil, fmt.Errorf("%w: %s", ErrMissingTensor, name)
	}
	return a, nil
}

// randomSource makes up every tensor it is asked for, deterministically from the
// seed and the tensor's name: linear weights uniform in ±1/√in (PyTorch's default),
// embeddings in ±1, norm weights in 1±0.2, biases in ±0.1. Good enough to exercise
// every code path with activations of a realistic size.
type randomSource struct {
	b    mx.Backend
	seed uint64
}

func (r randomSource) has(string) bool { return false }

func (r randomSource) load(name string, shape []int) (*mx.Array, error) {
	center, radius := float32(0), float32(1)
	switch {
	case strings.HasSuffix(name, "norm.weight"):
		center, radius = 1, 0.2
	case strings.HasSuffix(name, ".bias"):
		radius = 0.1
	case strings.Contains(name, "embed_tokens"):
	case len(shape) == 2:
		radius = float32(1 / math.Sqrt(float64(shape[1])))
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	data := uniform(r.seed^h.Sum64(), numel(shape), center, radius)
	return mx.FromData(r.b, mx.Float32, data, shape...), nil
}

// uniform draws n values in center±radius, in parallel chunks with their own streams.
func uniform(seed uint64, n int, center, radius float32) []float32 {
	const chunk = 1 << 18
	out := make([]float32, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, numCPU()))
	for lo := 0; lo < n; lo += chunk {
		wg.Add(1)
		sem <- struct{}{}
		go func(lo int) {
			defer wg.Done()
			defer func() { <-sem }()
			rng := rand.New(rand.NewPCG(seed, uint64(lo)))
			for i := lo; i < min(lo+chunk, n); i++ {
				u := float32(rng.Uint64()>>40) / (1 << 24) // [0, 1)
				out[i] = center + radius*(2*u-1)
			}
		}(lo)
	}
	wg.Wait()
	return out
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
