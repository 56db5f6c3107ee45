package quant

import "fmt"

// Bit layout of MLX's packed weights.
//
// MLX stores every quantized row as one little-endian bit stream: value i of a row occupies
// bits [i*bits, (i+1)*bits) of the stream, least significant bit first, and the stream is
// read as uint32 words. For 2, 4 and 8 bits the kernels build whole uint32 words
// (mlx/backend/cpu/quantized.cpp quantize<T,U> with U = uint32_t); for 3, 5 and 6 bits they
// write bytes instead — 8 three-bit values into 3 bytes, 8 five-bit values into 5 bytes,
// 4 six-bit values into 3 bytes, each chunk LSB-first (the same function with U = uint8_t,
// and the bits == 3/5/6 branches of affine_quantize in mlx/backend/metal/kernels/quantized.h).
// Because every chunk is a whole number of bytes, the byte chunks laid end to end are exactly
// the LSB-first bit stream, and on a little-endian machine (every machine MLX runs on) those
// bytes read as uint32 words are the words Pack returns. A 3/5/6-bit value may therefore
// straddle a word boundary, as the 3-bit value 10 of a row does (bits 30..32).

// PackedLen returns the number of uint32 words that hold cols values of the given width.
// For a valid quantized row (cols a multiple of 32) it is exactly cols*bits/32.
func PackedLen(cols, bits int) int {
	return (cols*bits + 31) / 32
}

// Pack packs q, each value taken modulo 2^bits, into an LSB-first little-endian bit stream
// of uint32 words. bits must be in 1..8.
func Pack(q []uint8, bits int) []uint32 {
	checkBits(bits)
	out := make([]uint32, PackedLen(len(q), bits))
	packInto(out, q, bits)
	return out
}

// packInto writes the packed form of q into out, which must hold PackedLen(len(q), bits) words.
func packInto(out []uint32, q []uint8, bits int) {
	mask := uint64(1)<<bits - 1
	var acc uint64 // pending bits, LSB first
	n := 0         // how many bits of acc are pending
	w := 0
	for _, v := range q {
		acc |= (uint64(v) & mask) << n
		n += bits
		if n >= 32 {
			out[w] = uint32(acc)
			w++
			acc >>= 32
			n -= 32
		}
	}
	if n > 0 {
		out[w] = uint32(acc)
	}
}

// Unpack reads n values of the given width from the bit stream p. It panics if p holds fewer
// than PackedLen(n, bits) words.
func Unpack(p []uint32, n, bits int) []uint8 {
	checkBits(bits)
	if need := PackedLen(n, bits); len(p) < need {
		panic(fmt.Sprintf("quant: Unpack: %d words hold fewer than %d values of %d bits", len(p), n, bits))
	}
	out := make([]uint8, n)
	unpackInto(out, p, bits)
	return out
}

// unpackInto fills q from the bit stream p.
func unpackInto(q []uint8, p []uint32, bits int) {
	mask := uint64(1)<<bits - 1
	var acc uint64
	n := 0
	w := 0
	for i := range q {
		if n < bits {
			acc |= uint64(p[w]) << n
			w++
			n += 32
		}
		q[i] = uint8(acc & mask)
		acc >>= bits
		n -= bits
	}
}

func checkBits(bits int) {
	if bits < 1 || bits > 8 {
		panic(fmt.Sprintf("quant: %d bits per value is outside 1..8", bits))
	}
}
