package safetensors

import (
	"math"
	"slices"
	"testing"
)

func TestFloat16RoundTripsEveryBitPattern(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := Float16ToFloat32(h)
		isNaN := h&0x7C00 == 0x7C00 && h&0x3FF != 0
		if got := math.IsNaN(float64(f)); got != isNaN {
			t.Fatalf("Float16ToFloat32(%#04x) = %v, NaN = %v, want %v", h, f, got, isNaN)
		}
		if back := Float32ToFloat16(f); back != h {
			t.Fatalf("f16 %#04x -> f32 %v -> f16 %#04x, want %#04x", h, f, back, h)
		}
	}
}

func TestBFloat16RoundTripsEveryBitPattern(t *testing.T) {
	for i := range 1 << 16 {
		b := uint16(i)
		if back := Float32ToBFloat16(BFloat16ToFloat32(b)); back != b {
			t.Fatalf("bf16 %#04x -> f32 -> bf16 %#04x, want %#04x", b, back, b)
		}
	}
}

func TestFloat16KnownValues(t *testing.T) {
	tests := []struct {
		f float32
		h uint16
	}{
		{1, 0x3C00},
		{-2, 0xC000},
		{0.5, 0x3800},
		{65504, 0x7BFF},                       // largest finite
		{float32(math.Ldexp(1, -24)), 0x0001}, // smallest subnormal
		{float32(math.Ldexp(1023, -24)), 0x03FF},
		{float32(math.Ldexp(1, -14)), 0x0400}, // smallest normal
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{float32(math.Inf(1)), 0x7C00},
		{float32(math.Inf(-1)), 0xFC00},
	}
	for _, tt := range tests {
		if got := Float32ToFloat16(tt.f); got != tt.h {
			t.Errorf("Float32ToFloat16(%g) = %#04x, want %#04x", tt.f, got, tt.h)
		}
		if got := Float16ToFloat32(tt.h); math.Float32bits(got) != math.Float32bits(tt.f) {
			t.Errorf("Float16ToFloat32(%#04x) = %g, want %g", tt.h, got, tt.f)
		}
	}
}

func TestFloat32ToFloat16Rounding(t *testing.T) {
	ulp1 := float32(math.Ldexp(1, -10)) // spacing of halves just above 1
	tests := []struct {
		name string
		f    float32
		h    uint16
	}{
		{"tie rounds down to even", 1 + ulp1/2, 0x3C00},
		{"tie rounds up to even", 1 + 3*ulp1/2, 0x3C02},
		{"above tie rounds up", math.Nextafter32(1+ulp1/2, 2), 0x3C01},
		{"65519 rounds to max", 65519, 0x7BFF},
		{"65520 overflows to Inf", 65520, 0x7C00},
		{"huge overflows to -Inf", -1e10, 0xFC00},
		{"max float32 to Inf", math.MaxFloat32, 0x7C00},
		{"half the smallest subnormal ties to zero", float32(math.Ldexp(1, -25)), 0x0000},
		{"just over half rounds to smallest", math.Nextafter32(float32(math.Ldexp(1, -25)), 1), 0x0001},
		{"1.5 subnormal units ties to 2", float32(math.Ldexp(3, -25)), 0x0002},
		{"tiny to signed zero", -1e-30, 0x8000},
		{"subnormal carries into normal", float32(math.Ldexp(2047, -25)), 0x0400},
		{"float32 subnormal to zero", math.SmallestNonzeroFloat32, 0x0000},
	}
	for _, tt := range tests {
		if got := Float32ToFloat16(tt.f); got != tt.h {
			t.Errorf("%s: Float32ToFloat16(%g) = %#04x, want %#04x", tt.name, tt.f, got, tt.h)
		}
	}
}

func TestNaNStaysNaN(t *testing.T) {
	for _, bits := range []uint32{0x7FC00000, 0xFFC00000, 0x7F800001, 0x7F800FFF, 0x7FBFFFFF, 0xFF801000} {
		f := math.Float32frombits(bits)
		if h := Float32ToFloat16(f); !math.IsNaN(float64(Float16ToFloat32(h))) {
			t.Errorf("Float32ToFloat16(NaN %#08x) = %#04x, not NaN", bits, h)
		}
		if b := Float32ToBFloat16(f); !math.IsNaN(float64(BFloat16ToFloat32(b))) {
			t.Errorf("Float32ToBFloat16(NaN %#08x) = %#04x, not NaN", bits, b)
		}
	}
}

func TestFloat32ToBFloat16Rounding(t *testing.T) {
	tests := []struct {
		name string
		bits uint32
		want uint16
	}{
		{"exact", 0x3F800000, 0x3F80},
		{"tie rounds down to even", 0x3F808000, 0x3F80},
		{"tie rounds up to even", 0x3F818000, 0x3F82},
		{"below tie", 0x3F807FFF, 0x3F80},
		{"above tie", 0x3F808001, 0x3F81},
		{"negative tie", 0xBF818000, 0xBF82},
		{"rounds up to Inf", 0x7F7FFFFF, 0x7F80},
		{"Inf", 0x7F800000, 0x7F80},
		{"-0", 0x80000000, 0x8000},
	}
	for _, tt := range tests {
		if got := Float32ToBFloat16(math.Float32frombits(tt.bits)); got != tt.want {
			t.Errorf("%s: Float32ToBFloat16(%#08x) = %#04x, want %#04x", tt.name, tt.bits, got, tt.want)
		}
	}
}

func TestFloat32sRoundTrip(t *testing.T) {
	vals := []float32{0, 1, -2.5, 0.099975586, 65504, float32(math.Inf(-1))}
	for _, dt := range []DType{DTypeF32, DTypeF16, DTypeBF16, DTypeF64} {
		raw, err := EncodeFloat32s(dt, vals)
		if err != nil {
			t.Fatalf("EncodeFloat32s(%s): %v", dt, err)
		}
		if got, want := len(raw), len(vals)*dt.Size(); got != want {
			t.Fatalf("EncodeFloat32s(%s) gave %d bytes, want %d", dt, got, want)
		}
		got, err := Float32s(dt, raw)
		if err != nil {
			t.Fatalf("Float32s(%s): %v", dt, err)
		}
		want := slices.Clone(vals)
		if dt == DTypeBF16 {
			for i, v := range want {
				want[i] = BFloat16ToFloat32(Float32ToBFloat16(v))
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s round trip = %v, want %v", dt, got, want)
		}
	}
}

func TestFloat32sRejects(t *testing.T) {
	if _, err := Float32s(DTypeI32, make([]byte, 4)); err == nil {
		t.Error("Float32s(I32) succeeded, want error")
	}
	if _, err := Float32s(DTypeF16, make([]byte, 3)); err == nil {
		t.Error("Float32s(F16, 3 bytes) succeeded, want error")
	}
	if _, err := EncodeFloat32s(DTypeU8, []float32{1}); err == nil {
		t.Error("EncodeFloat32s(U8) succeeded, want error")
	}
}
