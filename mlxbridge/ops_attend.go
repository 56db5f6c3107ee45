package mlxbridge

// AttendParts is causal attention of q (B, Hq, L, D) over keys and values held
// in parts, ks[i] (B, Hkv, S_i, D) and vs[i] (B, Hkv, S_i, Dv), taken as if
// joined along axis 2 (S = ΣS_i): query row i sees keys 0 … S−L+i. It is
//
//	ScaledDotProductAttention(q, Concatenate(ks, 2), Concatenate(vs, 2), scale, true, nil)
//
// which is how it runs on a backend without a kernel for it (PartsAttender). A
// decode step's KV cache is such parts, a long frozen part and a short tail:
// the kernel reads them where they lie, in one op, where the composed form
// copies them into one buffer first. Meant for a few query rows against many
// keys; not differentiable through the kernel (traced inputs take the composed
// path).
//
// A part may be held in a 16-bit float type under float32 queries (a 16-bit KV
// cache): it is read widened, as if cast to q's dtype first.
func AttendParts(q *Array, ks, vs []*Array, scale float32) *Array {
	if len(ks) == 0 || len(ks) != len(vs) {
		return Errorf("attend parts: %d key parts and %d value parts", len(ks), len(vs))
	}
	xs := append(append([]*Array{q}, ks...), vs...)
	if e := checkFloat("attend parts", xs...); e != nil {
		return e
	}
	if e := checkParts(q, ks, vs); e != nil {
		return e
	}
	f, ok := q.b.(PartsAttender)
	if !ok || traced(xs...) {
		return ScaledDotProductAttention(q, Concatenate(widened(ks, q.dtype), 2), Concatenate(widened(vs, q.dtype), 2), scale, true, nil)
	}
	h, err := f.AttendParts(q, ks, vs, scale)
	keepAlive(xs)
	return newArray("attend parts", q.b, h, err, []int{q.shape[0], q.shape[1], q.shape[2], vs[0].shape[3]}, q.dtype)
}

// checkParts checks the shapes AttendParts takes: q (B,H,L,D) and parts of one
// kv-head count, dtype and head sizes, holding at least L keys in all.
func checkParts(q *Array, ks, vs []*Array) *Array {
	if len(q.shape) != 4 {
		return Errorf("attend parts: q must be (B,H,L,D), got %s", fmtShape(q.shape))
	}
	s := 0
	for i := range ks {
		k, v := ks[i], vs[i]
		if len(k.shape) != 4 || len(v.shape) != 4 || !partType(k.dtype, q.dtype) || !partType(v.dtype, q.dtype) ||
			k.shape[0] != q.shape[0] || k.shape[3] != q.shape[3] || k.shape[1] != ks[0].shape[1] ||
			!sameShape(v.shape[:3], k.shape[:3]) || v.shape[3] != vs[0].shape[3] {
			return Errorf("attend parts: q %s %s, part %d keys %s %s, values %s %s do not fit",
				fmtShape(q.shape), q.dtype, i, fmtShape(k.shape), k.dtype, fmtShape(v.shape), v.dtype)
		}
		s += k.shape[2]
	}
	hkv := ks[0].shape[1]
	if hkv == 0 || q.shape[1]%hkv != 0 || q.shape[2] > s {
		return Errorf("attend parts: %d query heads over %d kv heads, %d queries over %d keys", q.shape[1], hkv, q.shape[2], s)
	}
	return nil
}

// partType reports whether a part of dtype dt may go with queries of dtype q:
// the same, or 16 bits under float32.
func partType(dt, q DType) bool {
	return dt == q || q == Float32 && (dt == BFloat16 || dt == Float16)
}

// widened returns the parts cast to dt.
func widened(parts []*Array, dt DType) []*Array {
	out := make([]*Array, len(parts))
	for i, p := range parts {
		out[i] = AsType(p, dt)
	}
	return out
}

// QuantizedKV is keys or values (B, Hkv, S, D) quantized along the head axis in
// MLX's affine format (Quantize), D padded with zeros to a multiple of the group
// size Dp: W (B, Hkv, S, Dp·bits/32) Uint32, Scales and Biases (B, Hkv, S,
// Dp/group). A quantized KV cache keeps its older positions so (mlx-lm's
// --kv-bits).
type QuantizedKV struct{ W, Scales, Biases *Array }

// AttendQuantized is AttendParts whose first part is held quantized: causal
// attention of q (B, Hq, L, D) over k0, v0 (dequantized and cut back to D)
// followed by the exact parts ks, vs (B, Hkv, S_i, D), which may be none. Keys and
// values have q's head size D. It is
//
//	AttendParts(q, [Dequantize(k0)[..., :D], ks...], [Dequantize(v0)[..., :D], vs...], scale)
//
// which is how a backend without a kernel for it (QuantizedAttender) runs it. A
// kernel reads each packed key and value once, where it lies: a decode step over
// an 8-bit cache then reads 28% of the bytes of a float32 one, where the composed
// form dequantizes the whole cache first. Not differentiable through the kernel.
func AttendQuantized(q *Array, k0, v0 QuantizedKV, groupSize, bits int, ks, vs []*Array, scale float32) *Array {
	if len(ks) != len(vs) {
		return Errorf("attend quantized: %d key parts and %d value parts", len(ks), len(vs))
	}
	xs := append(append([]*Array{q, k0.W, k0.Scales, k0.Biases, v0.W, v0.Scales, v0.Biases}, ks...), vs...)
	if e := check("attend quantized", xs...); e != nil {
		return e
	}
	if e := checkFloat("attend quantized", q); e != nil {
		return e
	}
	if len(q.shape) != 4 {
		return Errorf("attend quantized: q must be (B,H,L,D), got %s", fmtShape(q.shape))
	}
	d := q.shape[3]
	for _, kv := range []QuantizedKV{k0, v0} {
		_, cols, e := quantShape("attend quantized", kv.W, kv.Scales, kv.Biases, groupSize, bits)
		if e != nil {
			return e
		}
		if len(kv.W.shape) != 4 || kv.W.shape[0] != q.shape[0] || !sameShape(kv.W.shape[:3], k0.W.shape[:3]) ||
			cols < d || cols-d >= groupSize || kv.Scales.dtype != q.dtype {
			return Errorf("attend quantized: q %s %s with packed %s (%d columns, scales %s) do not fit",
				fmtShape(q.shape), q.dtype, fmtShape(kv.W.shape), cols, kv.Scales.dtype)
		}
	}
	dense := func(kv QuantizedKV) *Array {
		x := Dequantize(kv.W, kv.Scales, kv.Biases, groupSize, bits)
		if x.err == nil && x.shape[3] != d {
			x = SliceAxis(x, 3, 0, d)
		}
		return x
	}
	f, ok := q.b.(QuantizedAttender)
	if !ok || !f.AttendsQuantized(bits) || traced(xs...) {
		return AttendParts(q, append([]*Array{dense(k0)}, ks...), append([]*Array{dense(v0)}, vs...), scale)
	}
	// The parts go through AttendParts' checks, the quantized one as a stand-in of
	// its dequantized shape; nothing is computed for it.
	stand := &Array{b: q.b, shape: []int{q.shape[0], k0.W.shape[1], k0.W.shape[2], d}, dtype: q.dtype}
	if e := checkParts(q, append([]*Array{stand}, ks...), append([]*Array{stand}, vs...)); e != nil {
		return e
	}
	h, err := f.AttendQuantized(q, k0, v0, groupSize, bits, ks, vs, scale)
	keepAlive(xs)
	return newArray("attend quantized", q.b, h, err, []int{q.shape[0], q.shape[1], q.shape[2], d}, q.dtype)
}
