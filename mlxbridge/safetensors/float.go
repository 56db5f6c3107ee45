package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Float32s decodes little-endian F32, F16, BF16 or F64 data into float32,
// the type the cpu backend computes in. F64 values outside float32's range
// become ±Inf.
func Float32s(dt DType, raw []byte) ([]float32, error) {
	switch dt {
	case DTypeF32, DTypeF16, DTypeBF16, DTypeF64:
	default:
		return nil, fmt.Errorf("safetensors: cannot decode %s as float32", dt)
	}
	size := dt.Size()
	if len(raw)%size != 0 {
		return nil, fmt.Errorf("safetensors: %d bytes is not a whole number of %s values", len(raw), dt)
	}
	out := make([]float32, len(raw)/size)
	switch dt {
	case DTypeF32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case DTypeF16:
		for i := range out {
			out[i] = Float16ToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	case DTypeBF16:
		for i := range out {
			out[i] = BFloat16ToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	case DTypeF64:
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:])))
		}
	}
	return out, nil
}

// EncodeFloat32s encodes v as little-endian F32, F16, BF16 or F64. Narrowing
// rounds to nearest, ties to even; NaN stays NaN and values too large for
// F16 become ±Inf.
func EncodeFloat32s(dt DType, v []float32) ([]byte, error) {
	switch dt {
	case DTypeF32, DTypeF16, DTypeBF16, DTypeF64:
	default:
		return nil, fmt.Errorf("safetensors: cannot encode float32 as %s", dt)
	}
	out := make([]byte, len(v)*dt.Size())
	switch dt {
	case DTypeF32:
		for i, x := range v {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
		}
	case DTypeF16:
		for i, x := range v {
			binary.LittleEndian.PutUint16(out[2*i:], Float32ToFloat16(x))
		}
	case DTypeBF16:
		for i, x := range v {
			binary.LittleEndian.PutUint16(out[2*i:], Float32ToBFloat16(x))
		}
	case DTypeF64:
		for i, x := range v {
			binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(float64(x)))
		}
	}
	return out, nil
}

// Float16ToFloat32 widens an IEEE 754 half-precision value exactly.
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1F
	mant := uint32(h & 0x3FF)
	switch {
	case exp == 0x1F: // Inf or NaN; the NaN payload moves to the top of the float32 mantissa
		return math.Float32frombits(sign | 0x7F800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: mant * 2^-24, normalised into float32's wider exponent range.
	e := uint32(127 - 15 + 1)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3FF)<<13)
}

// Float32ToFloat16 narrows to IEEE 754 half precision, rounding to nearest
// with ties to even. Values beyond the half range become ±Inf; NaN stays NaN
// with as much of its payload as fits (a payload that would vanish becomes
// the quiet bit, so the result is never Inf).
func Float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xFF
	mant := b & 0x7FFFFF
	if exp == 0xFF {
		if mant == 0 {
			return sign | 0x7C00
		}
		payload := uint16(mant >> 13)
		if payload == 0 {
			payload = 0x200
		}
		return sign | 0x7C00 | payload
	}
	e := exp - 127 + 15 // biased half exponent
	if e >= 0x1F {
		return sign | 0x7C00
	}
	if e <= 0 {
		// Subnormal half (or zero): the value is full * 2^(exp-150) and the
		// half's mantissa counts units of 2^-24, so shift by 14-e. Below
		// 2^-25 (shift > 24) everything rounds to zero.
		if e < -10 {
			return sign
		}
		full := mant | 0x800000
		shift := uint(14 - e)
		return sign | uint16(roundShift(full, shift))
	}
	// Normal: drop 13 mantissa bits. A carry out of the mantissa correctly
	// bumps the exponent, and out of the top exponent gives Inf.
	h := sign | uint16(e)<<10 | uint16(mant>>13)
	rem := mant & 0x1FFF
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++
	}
	return h
}

// roundShift is x >> shift rounded to nearest, ties to even; 1 <= shift <= 31.
func roundShift(x uint32, shift uint) uint32 {
	q := x >> shift
	rem := x & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	return q
}

// BFloat16ToFloat32 widens a bfloat16 value exactly: bfloat16 is the top
// half of a float32.
func BFloat16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// Float32ToBFloat16 narrows to bfloat16, rounding to nearest with ties to
// even. NaN stays NaN (quiet bit set if the kept payload would be empty).
func Float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7F800000 == 0x7F800000 && b&0x7FFFFF != 0 {
		h := uint16(b >> 16)
		if h&0x7F == 0 {
			h |= 0x40
		}
		return h
	}
	return uint16((b + 0x7FFF + (b>>16)&1) >> 16)
}
