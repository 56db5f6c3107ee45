package quant

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestPackNibbleOrder(t *testing.T) {
	// Value i sits in bits [4i, 4i+4): 15 in the lowest nibble, 8 in the highest.
	q := []uint8{15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}
	got := Pack(q, 4)
	want := []uint32{0x89abcdef, 0x01234567}
	if !slices.Equal(got, want) {
		t.Fatalf("Pack = %#x, want %#x", got, want)
	}
}

func TestPackStraddlesWords(t *testing.T) {
	// 3-bit values: value 10 (here 2 = 0b010) occupies bits 30..32, so its low two bits
	// (0b10) are the top of word 0 and its high bit (0) is bit 0 of word 1.
	q := []uint8{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2}
	got := Pack(q, 3)
	var want0 uint32
	for i, v := range q[:10] {
		want0 |= uint32(v) << (3 * i)
	}
	want0 |= 0b10 << 30
	want := []uint32{want0, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("Pack = %#x, want %#x", got, want)
	}
	// 5-bit: value 6 occupies bits 30..34.
	q = []uint8{0, 0, 0, 0, 0, 0, 0b10111}
	got = Pack(q, 5)
	want = []uint32{0b11 << 30, 0b101}
	if !slices.Equal(got, want) {
		t.Fatalf("Pack 5-bit = %#x, want %#x", got, want)
	}
}

// mlxBytePack packs q the way MLX's kernels write 3/5/6-bit values: 8 (3 and 5 bits) or 4
// (6 bits) values at a time into a uint64, written out as 3, 5 or 3 little-endian bytes
// (mlx/backend/cpu/quantized.cpp quantize<T, uint8_t>). Power-of-two widths fill whole
// uint32 words. It is an independent model of MLX's layout for checking Pack.
func mlxBytePack(q []uint8, bits int) []uint32 {
	perPack, bytesPerPack := 32/bits, 4
	switch bits {
	case 3:
		perPack, bytesPerPack = 8, 3
	case 5:
		perPack, bytesPerPack = 8, 5
	case 6:
		perPack, bytesPerPack = 4, 3
	}
	var buf []byte
	for i := 0; i < len(q); i += perPack {
		var el uint64
		for k := 0; k < perPack; k++ {
			el |= uint64(q[i+k]) << (k * bits)
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], el)
		buf = append(buf, b[:bytesPerPack]...)
	}
	out := make([]uint32, len(buf)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(buf[4*i:])
	}
	return out
}

func TestPackMatchesMLXByteLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, n := range []int{32, 64, 96, 128, 4096} {
			q := make([]uint8, n)
			for i := range q {
				q[i] = uint8(rng.IntN(1 << bits))
			}
			got, want := Pack(q, bits), mlxBytePack(q, bits)
			if !slices.Equal(got, want) {
				t.Fatalf("bits=%d n=%d: Pack differs from MLX's byte packing:\n got %#x\nwant %#x", bits, n, got[:4], want[:4])
			}
		}
	}
}

func TestPackUnpackRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for bits := 1; bits <= 8; bits++ {
		for n := 0; n <= 70; n++ {
			q := make([]uint8, n)
			for i := range q {
				q[i] = uint8(rng.IntN(1 << bits))
			}
			p := Pack(q, bits)
			if len(p) != PackedLen(n, bits) {
				t.Fatalf("bits=%d n=%d: %d words, want %d", bits, n, len(p), PackedLen(n, bits))
			}
			if got := Unpack(p, n, bits); !slices.Equal(got, q) {
				t.Fatalf("bits=%d n=%d: Unpack(Pack(q)) = %v, want %v", bits, n, got, q)
			}
		}
	}
}

func TestPackedLen(t *testing.T) {
	for _, tc := range []struct{ cols, bits, want int }{
		{32, 2, 2}, {32, 3, 3}, {32, 4, 4}, {32, 5, 5}, {32, 6, 6}, {32, 8, 8},
		{4096, 4, 512}, {11008, 3, 1032}, {10, 3, 1}, {11, 3, 2},
	} {
		if got := PackedLen(tc.cols, tc.bits); got != tc.want {
			t.Errorf("PackedLen(%d, %d) = %d, want %d", tc.cols, tc.bits, got, tc.want)
		}
	}
}

func TestUnpackShortPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Unpack of too few words did not panic")
		}
	}()
	Unpack([]uint32{0}, 11, 3)
}
