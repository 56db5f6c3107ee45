package mlxbridge

// Compact returns x with the same values, dtype and shape, held as compactly as its
// backend can. The cpu backend computes float16 and bfloat16 in float32 and keeps
// results so; a compact copy takes two bytes a value. Matrix products read it at that
// width, which is what a 16-bit checkpoint's weights need: decoding streams them at
// half the bytes of float32. Every other op widens it as it reads it, so Compact suits
// arrays that mostly feed products. On other backends, and for other dtypes, it
// returns x, as it does for an input being differentiated.
func Compact(x *Array) *Array {
	if e := check("compact", x); e != nil {
		return e
	}
	c, ok := x.b.(Compacter)
	if !ok || x.dtype != Float16 && x.dtype != BFloat16 || traced(x) {
		return x
	}
	h, err := c.Compact(x)
	keepAlive(x)
	return newArray("compact", x.b, h, err, x.shape, x.dtype)
}
