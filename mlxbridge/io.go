package mlxbridge

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// TensorSource is what a safetensors File or a sharded Set offers.
type TensorSource interface {
	Names() []string
	Info(name string) (safetensors.TensorInfo, bool)
	Data(name string) ([]byte, error)
}

// LoadTensor copies one tensor from a safetensors source onto backend b. F32, F16
// and BF16 become float arrays of that dtype (computed in float32); U32, I32, U8
// and BOOL keep their type; I64, I16, I8 and U16 become Int32 when every value fits.
func LoadTensor(b Backend, src TensorSource, name string) (*Array, error) {
	info, ok := src.Info(name)
	if !ok {
		return nil, fmt.Errorf("mlxbridge: tensor %q not found", name)
	}
	raw, err := src.Data(name)
	if err != nil {
		return nil, err
	}
	a, err := fromRaw(b, info.DType, raw, info.Shape)
	if err != nil {
		return nil, fmt.Errorf("mlxbridge: tensor %q: %w", name, err)
	}
	return a, nil
}

// LoadTensorCompact is LoadTensor for a float16 or bfloat16 tensor on a backend that
// holds such arrays compact (Compacter): the bytes become the compact array directly,
// never widened to float32 on the way, so loading a 16-bit checkpoint peaks near its
// own size. Other tensors, and other backends, load as LoadTensor loads them.
func LoadTensorCompact(b Backend, src TensorSource, name string) (*Array, error) {
	c, ok := b.(Compacter)
	info, found := src.Info(name)
	if !ok || !found || info.DType != safetensors.DTypeBF16 && info.DType != safetensors.DTypeF16 {
		return LoadTensor(b, src, name)
	}
	if err := checkShape(info.Shape); err != nil {
		return nil, fmt.Errorf("mlxbridge: tensor %q: %w", name, err)
	}
	raw, err := src.Data(name)
	if err != nil {
		return nil, err
	}
	if n := numel(info.Shape); len(raw) != 2*n {
		return nil, fmt.Errorf("mlxbridge: tensor %q: %d bytes for %d 16-bit values", name, len(raw), n)
	}
	dt := BFloat16
	if info.DType == safetensors.DTypeF16 {
		dt = Float16
	}
	h, err := c.CompactBits(dt, raw)
	a := newArray("load compact", b, h, err, info.Shape, dt)
	return a, a.Err()
}

func fromRaw(b Backend, dt safetensors.DType, raw []byte, shape []int) (*Array, error) {
	n := numel(shape)
	var a *Array
	switch dt {
	case safetensors.DTypeF32, safetensors.DTypeF16, safetensors.DTypeBF16, safetensors.DTypeF64:
		v, err := safetensors.Float32s(dt, raw)
		if err != nil {
			return nil, err
		}
		kind := map[safetensors.DType]DType{safetensors.DTypeF16: Float16, safetensors.DTypeBF16: BFloat16}[dt]
		a = FromData(b, kind, v, shape...) // F32 and F64 map to the zero value, Float32
	case safetensors.DTypeU32:
		v := make([]uint32, n)
		for i := range v {
			v[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
		a = FromData(b, Uint32, v, shape...)
	case safetensors.DTypeU8, safetensors.DTypeBool:
		kind := Uint8
		if dt == safetensors.DTypeBool {
			kind = Bool
		}
		a = FromData(b, kind, append([]uint8(nil), raw[:n]...), shape...)
	case safetensors.DTypeI32, safetensors.DTypeI64, safetensors.DTypeI16, safetensors.DTypeI8, safetensors.DTypeU16:
		v := make([]int32, n)
		size := dt.Size()
		for i := range v {
			var x int64
			switch dt {
			case safetensors.DTypeI64:
				x = int64(binary.LittleEndian.Uint64(raw[8*i:]))
			case safetensors.DTypeI32:
				x = int64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
			case safetensors.DTypeI16:
				x = int64(int16(binary.LittleEndian.Uint16(raw[2*i:])))
			case safetensors.DTypeU16:
				x = int64(binary.LittleEndian.Uint16(raw[2*i:]))
			default:
				x = int64(int8(raw[i*size]))
			}
			if x < math.MinInt32 || x > math.MaxInt32 {
				return nil, fmt.Errorf("%s value %d does not fit int32", dt, x)
			}
			v[i] = int32(x)
		}
		a = FromData(b, Int32, v, shape...)
	default:
		return nil, fmt.Errorf("dtype %s is not supported", dt)
	}
	return a, a.Err()
}

// LoadSafetensors opens a file and loads every tensor in it onto backend b.
func LoadSafetensors(b Backend, path string) (map[string]*Array, map[string]string, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	out := make(map[string]*Array, f.Len())
	for _, name := range f.Names() {
		a, err := LoadTensor(b, f, name)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		out[name] = a
	}
	return out, f.Metadata(), nil
}

// ToTensor encodes an array for safetensors in its own dtype.
func ToTensor(name string, a *Array) (safetensors.Tensor, error) {
	t := safetensors.Tensor{Name: name, Shape: a.Shape()}
	if err := a.Err(); err != nil {
		return t, err
	}
	switch a.dtype {
	case Float32, Float16, BFloat16:
		t.DType = map[DType]safetensors.DType{Float32: safetensors.DTypeF32, Float16: safetensors.DTypeF16, BFloat16: safetensors.DTypeBF16}[a.dtype]
		v, err := a.Float32s()
		if err != nil {
			return t, err
		}
		if t.Data, err = safetensors.EncodeFloat32s(t.DType, v); err != nil {
			return t, err
		}
	case Int32, Uint32:
		t.DType = safetensors.DTypeI32
		var words []uint32
		if a.dtype == Uint32 {
			t.DType = safetensors.DTypeU32
			v, err := a.Uint32s()
			if err != nil {
				return t, err
			}
			words = v
		} else {
			v, err := a.Int32s()
			if err != nil {
				return t, err
			}
			words = make([]uint32, len(v))
			for i, x := range v {
				words[i] = uint32(x)
			}
		}
		t.Data = make([]byte, 4*len(words))
		for i, w := range words {
			binary.LittleEndian.PutUint32(t.Data[4*i:], w)
		}
	case Uint8, Bool:
		t.DType = safetensors.DTypeU8
		if a.dtype == Bool {
			t.DType = safetensors.DTypeBool
		}
		v, err := a.Uint8s()
		if err != nil {
			return t, err
		}
		t.Data = v
	}
	return t, nil
}

// SaveSafetensors writes arrays to path atomically, with optional metadata.
func SaveSafetensors(path string, arrays map[string]*Array, metadata map[string]string) error {
	ts := make([]safetensors.Tensor, 0, len(arrays))
	for name, a := range arrays {
		t, err := ToTensor(name, a)
		if err != nil {
			return fmt.Errorf("mlxbridge: save %s: tensor %q: %w", path, name, err)
		}
		ts = append(ts, t)
	}
	return safetensors.WriteFile(path, ts, metadata)
}
