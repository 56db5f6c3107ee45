package mlxbridge

import (
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// Array is an immutable n-d array owned by a backend. Ops return new arrays.
// An Array may instead carry an error (see the package doc).
type Array struct {
	b     Backend
	h     Handle
	shape []int
	dtype DType
	err   error
	node  *node // non-nil when the array depends on a parameter being differentiated
}

// Shape returns the array's dimensions (a copy).
func (a *Array) Shape() []int { return clone(a.shape) }

// Dim returns the size of one axis; negative axes count from the end.
func (a *Array) Dim(axis int) int {
	if axis < 0 {
		axis += len(a.shape)
	}
	return a.shape[axis]
}

func (a *Array) Ndim() int        { return len(a.shape) }
func (a *Array) Size() int        { return numel(a.shape) }
func (a *Array) DType() DType     { return a.dtype }
func (a *Array) Backend() Backend { return a.b }
func (a *Array) Handle() Handle   { return a.h }

// Err returns the error the array carries, if any.
func (a *Array) Err() error {
	if a == nil {
		return errors.New("mlxbridge: nil array")
	}
	return a.err
}

// Nbytes is the array's size in storage.
func (a *Array) Nbytes() int64 { return int64(a.Size()) * int64(a.dtype.Size()) }

func (a *Array) String() string {
	if a.err != nil {
		return "Array(error: " + a.err.Error() + ")"
	}
	return fmt.Sprintf("Array%s %s", fmtShape(a.shape), a.dtype)
}

// Errorf returns an array that carries an error; backends and composite ops use it.
func Errorf(format string, args ...any) *Array {
	return &Array{err: fmt.Errorf("mlxbridge: "+format, args...)}
}

func errArray(err error) *Array { return &Array{err: err} }

// ErrorArray returns an array that carries err unchanged, so a caller's error
// raised inside a function given to ValueAndGrad comes back out of it with its
// errors.Is chain and its own words.
func ErrorArray(err error) *Array { return errArray(err) }

// Wrap makes an Array from a backend handle. Backends use it to return arrays
// from their own abilities (Grader); everyone else uses the ops.
func Wrap(b Backend, h Handle, shape []int, dt DType) *Array {
	return &Array{b: b, h: h, shape: clone(shape), dtype: dt}
}

func newArray(op string, b Backend, h Handle, err error, shape []int, dt DType) *Array {
	if err != nil {
		return errArray(fmt.Errorf("mlxbridge: %s: %w", op, err))
	}
	return &Array{b: b, h: h, shape: shape, dtype: dt}
}

// check returns an error array if any input is nil, carries an error, or lives on
// another backend than the first.
func check(op string, xs ...*Array) *Array {
	for _, x := range xs {
		if x == nil {
			return Errorf("%s: nil array", op)
		}
		if x.err != nil {
			return x
		}
	}
	for _, x := range xs[1:] {
		if x.b != xs[0].b {
			return Errorf("%s: arrays from backends %s and %s", op, xs[0].b.Name(), x.b.Name())
		}
	}
	return nil
}

func checkFloat(op string, xs ...*Array) *Array {
	if e := check(op, xs...); e != nil {
		return e
	}
	for _, x := range xs {
		if !x.dtype.IsFloat() {
			return Errorf("%s: needs a float array, got %s", op, x.dtype)
		}
	}
	return nil
}

// FromFloat32 makes a Float32 array on the default backend.
func FromFloat32(data []float32, shape ...int) *Array {
	return FromData(Default(), Float32, data, shape...)
}

// FromInt32 makes an Int32 array on the default backend.
func FromInt32(data []int32, shape ...int) *Array {
	return FromData(Default(), Int32, data, shape...)
}

// Scalar makes a 0-d Float32 array on the default backend.
func Scalar(v float32) *Array { return FromData(Default(), Float32, []float32{v}) }

// FromData makes an array of dtype dt on backend b. data is []float32 for float
// dtypes (rounded to dt's precision), []int32, []uint32, or []uint8 for Uint8/Bool.
func FromData(b Backend, dt DType, data any, shape ...int) *Array {
	if err := checkShape(shape); err != nil {
		return Errorf("from data: %v", err)
	}
	n := numel(shape)
	var got int
	switch d := data.(type) {
	case []float32:
		if !dt.IsFloat() {
			return Errorf("from data: []float32 for %s", dt)
		}
		got = len(d)
		if dt != Float32 {
			r := make([]float32, len(d))
			round := rounder(dt)
			for i, v := range d {
				r[i] = round(v)
			}
			data = r
		}
	case []int32:
		if dt != Int32 {
			return Errorf("from data: []int32 for %s", dt)
		}
		got = len(d)
	case []uint32:
		if dt != Uint32 {
			return Errorf("from data: []uint32 for %s", dt)
		}
		got = len(d)
	case []uint8:
		if dt != Uint8 && dt != Bool {
			return Errorf("from data: []uint8 for %s", dt)
		}
		got = len(d)
	default:
		return Errorf("from data: unsupported Go type %T", data)
	}
	if got != n {
		return Errorf("from data: %d values for shape %s", got, fmtShape(shape))
	}
	h, err := b.FromData(dt, clone(shape), data)
	return newArray("from data", b, h, err, clone(shape), dt)
}

// Full makes an array of shape filled with v on backend b (the default backend if b is nil).
func Full(b Backend, shape []int, v float32, dt DType) *Array {
	if err := checkShape(shape); err != nil {
		return Errorf("full: %v", err)
	}
	if b == nil {
		b = Default()
	}
	n := numel(shape)
	switch dt {
	case Int32:
		d := make([]int32, n)
		for i := range d {
			d[i] = int32(v)
		}
		return FromData(b, dt, d, shape...)
	case Uint32:
		d := make([]uint32, n)
		for i := range d {
			d[i] = uint32(v)
		}
		return FromData(b, dt, d, shape...)
	case Uint8, Bool:
		d := make([]uint8, n)
		for i := range d {
			d[i] = uint8(v)
		}
		return FromData(b, dt, d, shape...)
	}
	d := make([]float32, n)
	if v != 0 {
		for i := range d {
			d[i] = v
		}
	}
	return FromData(b, dt, d, shape...)
}

// ZerosLike makes zeros of like's shape and dtype on like's backend; Zeros and Ones
// make float32 arrays on the default backend.
func ZerosLike(like *Array) *Array { return Full(like.b, like.shape, 0, like.dtype) }
func Zeros(shape ...int) *Array    { return Full(nil, shape, 0, Float32) }
func Ones(shape ...int) *Array     { return Full(nil, shape, 1, Float32) }

// scalarLike is a 0-d array of v on x's backend with x's dtype.
func scalarLike(x *Array, v float32) *Array {
	return FromData(x.b, x.dtype, []float32{v})
}

// Eval computes lazily built arrays (a no-op on eager backends) and returns the
// first error any of them carries.
func Eval(xs ...*Array) error { return evaluate(xs, false) }

// AsyncEval starts computing lazily built arrays and returns without waiting
// for them, so the caller can build the next piece of work meanwhile (a
// decoder, the next token's forward pass); reading an array back waits for it.
// On a backend that is not lazy it only returns the first error.
func AsyncEval(xs ...*Array) error { return evaluate(xs, true) }

func evaluate(xs []*Array, async bool) error {
	for _, x := range xs {
		if err := x.Err(); err != nil {
			return err
		}
	}
	if len(xs) == 0 {
		return nil
	}
	if ev, ok := xs[0].b.(AsyncEvaluator); ok && async {
		return ev.AsyncEval(xs...)
	}
	if ev, ok := xs[0].b.(Evaluator); ok && !async {
		return ev.Eval(xs...)
	}
	return nil
}

// Free releases the arrays now where the backend can (Freer), instead of when
// the garbage collector finds them: none of xs may be used again, nor any array
// that shares its handle. Arrays computed from them keep what they read. On MLX
// this lets an op update a buffer in place: slice_update reuses its input's
// memory only when nothing else holds it. Elsewhere it does nothing.
func Free(xs ...*Array) {
	for _, x := range xs {
		if x == nil || x.err != nil {
			continue
		}
		if f, ok := x.b.(Freer); ok {
			f.Free(x)
		}
	}
}

// readback copies an array out as []T after checking its dtype with ok.
func readback[T any](a *Array, name string, ok bool) ([]T, error) {
	if err := a.Err(); err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("mlxbridge: %s of a %s array", name, a.dtype)
	}
	d, err := a.b.Data(a)
	keepAlive(a)
	if err != nil {
		return nil, err
	}
	return d.([]T), nil
}

// Float32s copies a float array out as float32 values.
func (a *Array) Float32s() ([]float32, error) {
	return readback[float32](a, "Float32s", a != nil && a.dtype.IsFloat())
}

// Float32sInto is Float32s into dst's storage where it has the room (dst may be
// nil), so a loop that reads an array every step (a decode loop's logits: 600 KB
// for a 151,936-token vocabulary) reuses one buffer instead of making garbage and
// faulting in fresh pages each time. The result may share dst's storage.
func (a *Array) Float32sInto(dst []float32) ([]float32, error) {
	if a == nil || a.Err() != nil || !a.dtype.IsFloat() {
		return a.Float32s() // its error
	}
	r, ok := a.b.(FloatReader)
	if !ok {
		return a.Float32s()
	}
	d, err := r.Float32sInto(a, dst)
	keepAlive(a)
	return d, err
}

// Int32s copies an Int32 array out.
func (a *Array) Int32s() ([]int32, error) {
	return readback[int32](a, "Int32s", a != nil && a.dtype == Int32)
}

// Uint32s copies a Uint32 array out.
func (a *Array) Uint32s() ([]uint32, error) {
	return readback[uint32](a, "Uint32s", a != nil && a.dtype == Uint32)
}

// Uint8s copies a Uint8 or Bool array out.
func (a *Array) Uint8s() ([]uint8, error) {
	return readback[uint8](a, "Uint8s", a != nil && (a.dtype == Uint8 || a.dtype == Bool))
}

// Item returns the single value of a one-element array as float32.
func (a *Array) Item() (float32, error) {
	if err := a.Err(); err != nil {
		return 0, err
	}
	if a.Size() != 1 {
		return 0, fmt.Errorf("mlxbridge: Item of an array of shape %s", fmtShape(a.shape))
	}
	switch a.dtype {
	case Int32:
		v, err := a.Int32s()
		if err != nil {
			return 0, err
		}
		return float32(v[0]), nil
	case Uint32:
		v, err := a.Uint32s()
		if err != nil {
			return 0, err
		}
		return float32(v[0]), nil
	case Uint8, Bool:
		v, err := a.Uint8s()
		if err != nil {
			return 0, err
		}
		return float32(v[0]), nil
	}
	v, err := a.Float32s()
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// Format prints small arrays' values; for debugging and test failures.
func (a *Array) Format() string {
	if a.err != nil {
		return a.String()
	}
	var sb strings.Builder
	sb.WriteString(a.String())
	if a.Size() <= 64 && a.dtype.IsFloat() {
		v, _ := a.Float32s()
		fmt.Fprintf(&sb, " %v", v)
	}
	return sb.String()
}

// rounder returns the function that rounds a float32 to dt's precision.
func rounder(dt DType) func(float32) float32 {
	switch dt {
	case Float16:
		return RoundFloat16
	case BFloat16:
		return RoundBFloat16
	}
	return func(v float32) float32 { return v }
}

// RoundBFloat16 rounds to the nearest bfloat16, ties to even.
func RoundBFloat16(v float32) float32 {
	return safetensors.BFloat16ToFloat32(safetensors.Float32ToBFloat16(v))
}

// RoundFloat16 rounds to the nearest IEEE half, ties to even; overflow gives ±Inf.
func RoundFloat16(v float32) float32 {
	return safetensors.Float16ToFloat32(safetensors.Float32ToFloat16(v))
}

// keepAlive keeps arrays reachable until a backend call that reads them has returned:
// a backend may release an array's memory as soon as the array is unreachable, and
// the compiler may consider an argument dead while the kernel still reads its data.
//
//go:noinline
func keepAlive(xs ...any) { runtime.KeepAlive(xs) }
