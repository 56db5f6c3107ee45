package cpu

import (
	"math"
	"sync"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/cpu/internal/par"
)

func (be *Backend) RMSNorm(x, w *mx.Array, eps float32) (mx.Handle, error) {
	wf := h(w).f
	d := len(wf)
	src := h(x).f
	out := newF(len(src)) // rmsNormRows writes every element
	rmsNormRows(out, src, wf, d, eps)
	if x.DType() == w.DType() {
		roundTo(x.DType(), out)
	}
	return fbuf(out), nil
}

// RMSNormGrad is mx.RMSNormGrader's dx, each row's sums in float64.
func (be *Backend) RMSNormGrad(x, w, g *mx.Array, eps float32) (mx.Handle, error) {
	wf, xf, gf := h(w).f, h(x).f, h(g).f
	d := len(wf)
	out := newF(len(xf))
	if d == 0 {
		return fbuf(out), nil
	}
	parallel(len(xf)/d, max(1, elemGrain/d), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, gr, o := xf[r*d:(r+1)*d], gf[r*d:(r+1)*d], out[r*d:(r+1)*d]
			var ss, dot float64
			for i, v := range xr {
				ss += float64(v) * float64(v)
				dot += float64(gr[i]) * float64(wf[i]) * float64(v)
			}
			rs := 1 / math.Sqrt(ss/float64(d)+float64(eps))
			c := rs * rs * rs * dot / float64(d)
			for i, v := range xr {
				o[i] = float32(rs*float64(gr[i])*float64(wf[i]) - float64(v)*c)
			}
		}
	})
	return fbuf(out), nil
}

// ropeMemo keeps the last angle tables RoPE computed. A decode step turns the
// queries and the keys of every layer by the same angles (60 calls a token for
// SmolLM2-135M), which cost more to compute than to apply.
var ropeMemo struct {
	sync.Mutex
	key      ropeKey
	cos, sin []float32 // read-only once stored
}

// ropeKey is what the angles depend on. Freqs is compared by identity: arrays are
// immutable, and the memo's key keeps the array alive.
type ropeKey struct {
	l, dims, offset int
	base, scale     float32
	inverse         bool
	freqs           *mx.Array
}

// ropeAngles is mx.RoPEAngles through ropeMemo.
func ropeAngles(l int, o mx.RoPEOptions) (cos, sin []float32) {
	k := ropeKey{l: l, dims: o.Dims, offset: o.Offset, base: o.Base, scale: o.Scale, inverse: o.Inverse, freqs: o.Freqs}
	ropeMemo.Lock()
	defer ropeMemo.Unlock()
	if ropeMemo.cos == nil || ropeMemo.key != k {
		ropeMemo.cos, ropeMemo.sin = mx.RoPEAngles(l, o)
		ropeMemo.key = k
	}
	return ropeMemo.cos, ropeMemo.sin
}

func (be *Backend) RoPE(x *mx.Array, o mx.RoPEOptions) (mx.Handle, error) {
	s := x.Shape()
	l, d := s[len(s)-2], s[len(s)-1]
	cos, sin := ropeAngles(l, o)
	src := h(x).f
	nrows := 0
	if d > 0 {
		nrows = len(src) / d
	}
	out := newF(len(src))
	parallel(nrows, max(1, elemGrain/max(d, 1)), func(lo, hi int) {
		ropeRows(out, src, cos, sin, lo, hi, d, l, o.Dims, o.Traditional)
	})
	roundTo(x.DType(), out)
	return fbuf(out), nil
}

// attention describes one SDPA call in flat slices, shared by forward and backward.
type attention struct {
	b, hq, hkv, l, s, d, dv int
	q, k, v                 []float32
	scale                   float32
	causal                  bool
	mf                      []float32 // additive mask, or
	mb                      []uint8   // keep-mask, with
	mst                     []int     // its strides broadcast to (B,Hq,L,S)
}

func newAttention(q, k, v *mx.Array, scale float32, causal bool, mask *mx.Array) *attention {
	qs, ks, vs := q.Shape(), k.Shape(), v.Shape()
	a := &attention{b: qs[0], hq: qs[1], l: qs[2], d: qs[3], hkv: ks[1], s: ks[2], dv: vs[3],
		q: h(q).f, k: h(k).f, v: h(v).f, scale: scale, causal: causal}
	if mask != nil {
		a.mst = bstrides(mask.Shape(), []int{a.b, a.hq, a.l, a.s})
		if mask.DType() == mx.Bool {
			a.mb = h(mask).b
		} else {
			a.mf = asFloat(mask)
		}
	}
	return a
}

// probs fills p (L, S) with the attention probabilities of query head bh (b·Hq+h).
func (a *attention) probs(bh int, p []float32) {
	bi, hh := bh/a.hq, bh%a.hq
	kv := bi*a.hkv + hh/(a.hq/a.hkv)
	l, s, d := a.l, a.s, a.d
	sgemmOne(false, true, l, s, d, a.q[bh*l*d:], d, a.k[kv*s*d:], d, 0, p, s)
	if a.mst == nil { // no explicit mask: scale, causal limit and softmax in one C pass
		first := s
		if a.causal {
			first = s - l + 1
		}
		softmaxCausalRows(p, l, s, first, a.scale)
		return
	}
	negInf := float32(math.Inf(-1))
	for i := 0; i < l; i++ {
		row := p[i*s : (i+1)*s]
		limit := s
		if a.causal {
			limit = i + s - l + 1
		}
		for j := range row {
			x := row[j] * a.scale
			off := bi*a.mst[0] + hh*a.mst[1] + i*a.mst[2] + j*a.mst[3]
			switch {
			case j >= limit:
				x = negInf
			case a.mb != nil && a.mb[off] == 0:
				x = negInf
			case a.mb == nil:
				x += a.mf[off]
			}
			row[j] = x
		}
		softmaxRows(row, row, s) // a fully masked row gives NaN, as in MLX
	}
}

// kvHead returns the flat index (b·Hkv+g) of the kv head query head bh reads.
func (a *attention) kvHead(bh int) int { return bh/a.hq*a.hkv + bh%a.hq/(a.hq/a.hkv) }

// SDPA runs one (batch, head) at a time: scores = q·kᵀ through sgemm, the mask and a
// softmax per row, then probabilities·v through sgemm. Heads run in parallel. A causal
// attention without a mask over many rows (a prompt's) goes a block of rows at a time
// (causalBlocks).
func (be *Backend) SDPA(q, k, v *mx.Array, scale float32, causal bool, mask *mx.Array) (mx.Handle, error) {
	a := newAttention(q, k, v, scale, causal, mask)
	out := newF(a.b * a.hq * a.l * a.dv)
	blocks, prows := a.causal && a.mst == nil && a.l >= 2*causalBlock, a.l
	if blocks {
		prows = causalBlock // a block's probabilities at a time
	}
	parallel(a.b*a.hq, 1, func(lo, hi int) {
		p := make([]float32, prows*a.s)
		for bh := lo; bh < hi; bh++ {
			kv := a.kvHead(bh)
			if blocks {
				a.causalBlocks(bh, kv, p, out)
				continue
			}
			a.probs(bh, p)
			sgemmOne(false, false, a.l, a.dv, a.s, p, a.s, a.v[kv*a.s*a.dv:], a.dv, 0, out[bh*a.l*a.dv:], a.dv)
		}
	})
	roundTo(q.DType(), out)
	return fbuf(out), nil
}

// causalBlock is how many query rows causalBlocks takes at a time.
const causalBlock = 64

// causalBlocks is SDPA's head bh (kv head kv) for a causal attention without a mask,
// causalBlock rows at a time: rows i0..i1 see the first s−l+i1 keys at most, so the
// scores and values of the keys none of them sees (the masked triangle, almost half of
// a fresh prompt's attention) are not computed. p holds a block's probabilities, n keys
// a row.
func (a *attention) causalBlocks(bh, kv int, p, out []float32) {
	l, s, d, dv := a.l, a.s, a.d, a.dv
	for i0 := 0; i0 < l; i0 += causalBlock {
		i1 := min(l, i0+causalBlock)
		nr, n := i1-i0, s-l+i1
		sgemmOne(false, true, nr, n, d, a.q[(bh*l+i0)*d:], d, a.k[kv*s*d:], d, 0, p, n)
		softmaxCausalRows(p, nr, n, s-l+1+i0, a.scale)
		sgemmOne(false, false, nr, dv, n, p, n, a.v[kv*s*dv:], dv, 0, out[(bh*l+i0)*dv:], dv)
	}
}

// attendGrain is the work (query rows × keys × head widths) of a group of heads
// below which AttendParts stays on one core. The keys and values of a decode step
// come from memory, not cache, so two cores help from a few hundred keys on (SmolLM2
// q4 decode at 16–270 positions: 8.0–9.7 ms a token on one core, 7.3–8.5 on two).
const attendGrain = 1 << 15

// AttendParts runs each (batch, kv head) group's query heads together: the scores
// of every part's keys, one causal softmax per row over all of them, then every
// part's values weighted by its slice of the probabilities. Each key and value is
// read once, where it lies; groups run in parallel when there is enough work, and a
// decode step whose groups do not share the cores evenly cuts each group's positions
// into pieces instead (attendArgs.split).
func (be *Backend) AttendParts(q *mx.Array, ks, vs []*mx.Array, scale float32) (mx.Handle, error) {
	return attend(q, nil, nil, ks, vs, scale), nil
}

// AttendsQuantized reports the widths AttendQuantized has a kernel for.
func (be *Backend) AttendsQuantized(bits int) bool { return bits == 2 || bits == 4 || bits == 8 }

// AttendQuantized is AttendParts with a quantized first part: each group's query
// rows, zero-padded to the packed head size and summed per group, score every
// packed key as it is unpacked, and every packed value is dequantized once as it
// is read.
func (be *Backend) AttendQuantized(q *mx.Array, k0, v0 mx.QuantizedKV, group, bits int, ks, vs []*mx.Array, scale float32) (mx.Handle, error) {
	return attend(q, newQuantPart(k0, group, bits), newQuantPart(v0, group, bits), ks, vs, scale), nil
}

// quantPart is a quantized first part of attend's keys or values in flat slices:
// n positions a head, dp values a position (the head size padded to the group).
type quantPart struct {
	w                              []uint32
	s, b                           []float32
	hkv, n, dp, group, bits, words int
}

func newQuantPart(kv mx.QuantizedKV, group, bits int) *quantPart {
	dp := kv.W.Dim(3) * 32 / bits
	return &quantPart{w: h(kv.W).u, s: h(kv.Scales).f, b: h(kv.Biases).f,
		hkv: kv.W.Dim(1), n: kv.W.Dim(2), dp: dp, group: group, bits: bits, words: kv.W.Dim(3)}
}

// head returns group g's words, scales and biases.
func (p *quantPart) head(g int) ([]uint32, []float32, []float32) {
	gs := p.dp / p.group
	return p.w[g*p.n*p.words:], p.s[g*p.n*gs:], p.b[g*p.n*gs:]
}

// attend is AttendParts, after a quantized first part kq, vq when they are not nil
// (AttendQuantized; values then have q's head size).
func attend(q *mx.Array, kq, vq *quantPart, ks, vs []*mx.Array, scale float32) *buf {
	qs := q.Shape()
	b, hq, l, d := qs[0], qs[1], qs[2], qs[3]
	a := &attendArgs{kq: kq, vq: vq, d: d, l: l, qf: h(q).f}
	if kq != nil {
		a.hkv, a.dv, a.s0 = kq.hkv, d, kq.n
	} else {
		a.hkv, a.dv = ks[0].Dim(1), vs[0].Dim(3)
	}
	a.rows = hq / a.hkv * l
	a.kf, a.vf, a.sz = make([][]float32, len(ks)), make([][]float32, len(ks)), make([]int, len(ks))
	a.kh, a.vh = make([][]uint16, len(ks)), make([][]uint16, len(ks)) // compact bfloat16 parts
	a.s = a.s0
	for i := range ks {
		a.kh[i], a.kf[i] = bf16Part(ks[i])
		a.vh[i], a.vf[i] = bf16Part(vs[i])
		a.sz[i] = ks[i].Dim(2)
		a.s += a.sz[i]
		a.half = a.half || a.kh[i] != nil || a.vh[i] != nil
	}
	groups, rows, s, dv := b*a.hkv, a.rows, a.s, a.dv
	out := newFZero(b * hq * l * dv)
	grain := max(1, attendGrain/max(1, rows*s*(d+dv)))
	if parts := a.splits(groups); parts > 1 {
		a.split(out, groups, parts, scale)
	} else {
		parallel(groups, grain, func(lo, hi int) {
			p, sc := make([]float32, rows*s), a.scratch()
			for g := lo; g < hi; g++ {
				a.scores(sc, g, 0, s, p, s)
				for r := 0; r < rows; r += l { // each query head's l rows: row i sees s−l+1+i keys
					softmaxCausalRows(p[r*s:], l, s, s-l+1, scale)
				}
				a.values(sc, g, 0, s, p, s, out[g*rows*dv:])
			}
		})
	}
	roundTo(q.DType(), out)
	return fbuf(out)
}

// attendArgs is one attend call's queries, keys and values in flat slices: a
// quantized first part (kq, vq, s0 positions), then exact parts of sz[i] positions,
// each float32 (kf, vf) or compact bfloat16 (kh, vh); s positions in all.
type attendArgs struct {
	kq, vq              *quantPart
	qf                  []float32
	kf, vf              [][]float32
	kh, vh              [][]uint16
	sz                  []int
	hkv, d, dv, l, rows int
	s0, s               int
	half                bool
}

// attendScratch is a goroutine's room for the kernels: the queries zero-padded to
// the packed head size and their group sums (a quantized part), the 16-bit scores
// kernel's room.
type attendScratch struct{ qp, qsum, tmp, ht []float32 }

func (a *attendArgs) scratch() *attendScratch {
	var sc attendScratch
	if a.half {
		sc.ht = make([]float32, bf16Block*a.d)
	}
	if kq := a.kq; kq != nil {
		sc.qp, sc.qsum, sc.tmp = make([]float32, a.rows*kq.dp), make([]float32, a.rows*kq.dp/kq.group), make([]float32, quantBlock*kq.dp)
	}
	return &sc
}

// scores sets p[r·ld + j − lo] = q_r·k_j for group g's rows and positions j in [lo, hi),
// each part's kernel over the positions it holds there.
func (a *attendArgs) scores(sc *attendScratch, g, lo, hi int, p []float32, ld int) {
	rows, d := a.rows, a.d
	qg := a.qf[g*rows*d:]
	if kq := a.kq; kq != nil && lo < a.s0 {
		dp, gs := kq.dp, kq.dp/kq.group
		for r := range rows { // zero past d since made, never written there
			copy(sc.qp[r*dp:r*dp+d], qg[r*d:(r+1)*d])
			for k := range gs {
				var sum float32
				for _, v := range sc.qp[r*dp+k*kq.group : r*dp+(k+1)*kq.group] {
					sum += v
				}
				sc.qsum[r*gs+k] = sum
			}
		}
		w, sv, bv := kq.head(g)
		n := min(hi, a.s0) - lo
		attendQuantScores(p, ld, sc.qp, sc.qsum, rows, dp, kq.group, kq.bits, w[lo*kq.words:], sv[lo*gs:], bv[lo*gs:], n, sc.tmp)
	}
	a.exactParts(g, lo, hi, p, func(i, at, n int, pp []float32) {
		if a.kh[i] != nil {
			attendBF16Scores(pp, ld, qg, rows, d, a.kh[i][at*d:], n, sc.ht)
		} else {
			attendScores(pp, ld, qg, rows, d, a.kf[i][at*d:], n)
		}
	})
}

// values adds Σ_j p[r·ld + j − lo]·v_j over positions j in [lo, hi) to group g's rows
// of og.
func (a *attendArgs) values(sc *attendScratch, g, lo, hi int, p []float32, ld int, og []float32) {
	rows, dv := a.rows, a.dv
	if vq := a.vq; vq != nil && lo < a.s0 {
		w, sv, bv := vq.head(g)
		gs := vq.dp / vq.group
		attendQuantValues(og, rows, dv, p, ld, vq.dp, vq.group, vq.bits, w[lo*vq.words:], sv[lo*gs:], bv[lo*gs:], min(hi, a.s0)-lo, sc.tmp)
	}
	a.exactParts(g, lo, hi, p, func(i, at, n int, pp []float32) {
		if a.vh[i] != nil {
			attendBF16Values(og, rows, dv, pp, ld, a.vh[i][at*dv:], n)
		} else {
			attendValues(og, rows, dv, pp, ld, a.vf[i][at*dv:], n)
		}
	})
}

// exactParts calls f for each exact part i holding positions of [lo, hi): its n
// positions there, from row at of the part's flat (group, position) rows, and the
// slice of p (laid out from position lo) that they use.
func (a *attendArgs) exactParts(g, lo, hi int, p []float32, f func(i, at, n int, pp []float32)) {
	off := a.s0
	for i, n := range a.sz {
		if from, to := max(lo, off), min(hi, off+n); from < to {
			f(i, g*n+from-off, to-from, p[from-lo:])
		}
		off += n
	}
}

// attendSplitMin is the fewest positions a piece of a split decode step takes.
const attendSplitMin = 256

// splits is how many pieces each group's positions are cut into for one decode step
// (one query row a head), so that the cores share the groups evenly: with 3 kv heads
// on 2 cores (SmolLM2's), whole groups leave one core idle a third of the time. 1 means
// whole groups (prefill, enough groups, or too few positions to cut).
func (a *attendArgs) splits(groups int) int {
	if forceSplits > 0 && a.l == 1 {
		return forceSplits
	}
	w := par.Cores()
	if a.l != 1 || w <= 1 || groups*a.rows*a.s*(a.d+a.dv) < 2*attendGrain {
		return 1
	}
	return max(1, min(w/gcd(groups, w), a.s/attendSplitMin))
}

// forceSplits, when set (tests), is splits' answer for every decode step.
var forceSplits int

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// split runs each group's positions in parts pieces across the cores, each piece's
// softmax left unnormalized with its rows' maxima and sums (inloop_softmax_part), then
// puts each group's pieces together: out = Σ e^(m_t − M)·o_t / Σ e^(m_t − M)·l_t, M the
// largest m_t (flash-decoding's merge).
func (a *attendArgs) split(out []float32, groups, parts int, scale float32) {
	rows, dv, s := a.rows, a.dv, a.s
	o := make([]float32, groups*parts*rows*dv)
	ml := make([]float32, groups*parts*rows*2) // each piece's rows' maxima, then sums
	n := (s + parts - 1) / parts
	par.Ranges(groups*parts, 1, par.Cores(), func(lo, hi int) {
		p, sc := make([]float32, rows*n), a.scratch()
		for t := lo; t < hi; t++ {
			g, i := t/parts, t%parts
			from, to := i*n, min(s, (i+1)*n)
			m, sum := ml[t*rows*2:][:rows], ml[t*rows*2+rows:][:rows]
			if from >= to {
				for r := range rows {
					m[r], sum[r] = float32(math.Inf(-1)), 0
				}
				continue
			}
			a.scores(sc, g, from, to, p, n)
			softmaxPart(p, rows, n, to-from, scale, m, sum)
			a.values(sc, g, from, to, p, n, o[t*rows*dv:])
		}
	})
	for g := range groups {
		pieces := ml[g*parts*rows*2:][:parts*rows*2] // piece i's maxima at i·2·rows, its sums rows on
		for r := range rows {
			big := float32(math.Inf(-1))
			for i := range parts {
				big = max(big, pieces[i*rows*2+r])
			}
			var total float64
			og := out[(g*rows+r)*dv:][:dv]
			for i := range parts {
				t := g*parts + i
				c := float32(math.Exp(float64(pieces[i*rows*2+r] - big)))
				total += float64(c) * float64(pieces[i*rows*2+rows+r])
				for j, v := range o[(t*rows+r)*dv:][:dv] {
					og[j] += c * v
				}
			}
			inv := float32(1 / total)
			for j := range og {
				og[j] *= inv
			}
		}
	}
}

// bf16Part returns a part of attend's keys or values: its bits when it is a compact
// bfloat16 array (a 16-bit KV cache, read by the bf16 kernels), else its floats.
func bf16Part(a *mx.Array) ([]uint16, []float32) {
	if c := raw(a); c.s != nil && a.DType() == mx.BFloat16 {
		return c.s, nil
	}
	return nil, h(a).f
}

// SDPAVJP is attention's backward pass. With P recomputed per head:
// dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − rowsum(dP∘P))·scale, dQ = dS·K, dK = dSᵀ·Q.
// Work is split by kv head, so the query heads sharing one accumulate without races.
func (be *Backend) SDPAVJP(q, k, v *mx.Array, scale float32, causal bool, mask, g *mx.Array) (dq, dk, dv mx.Handle, err error) {
	a := newAttention(q, k, v, scale, causal, mask)
	l, s, d, dvd := a.l, a.s, a.d, a.dv
	rep := a.hq / a.hkv
	gf := h(g).f
	dQ := newFZero(len(a.q))
	dK := newFZero(len(a.k))
	dV := newFZero(len(a.v))
	parallel(a.b*a.hkv, 1, func(lo, hi int) {
		p, dp := make([]float32, l*s), make([]float32, l*s)
		for kv := lo; kv < hi; kv++ {
			bi, gi := kv/a.hkv, kv%a.hkv
			for r := 0; r < rep; r++ {
				bh := bi*a.hq + gi*rep + r
				a.probs(bh, p)
				do := gf[bh*l*dvd:]
				sgemmOne(true, false, s, dvd, l, p, s, do, dvd, 1, dV[kv*s*dvd:], dvd)
				sgemmOne(false, true, l, s, dvd, do, dvd, a.v[kv*s*dvd:], dvd, 0, dp, s)
				for i := 0; i < l; i++ {
					pr, dr := p[i*s:(i+1)*s], dp[i*s:(i+1)*s]
					var dot float64
					for j := range pr {
						dot += float64(pr[j]) * float64(dr[j])
					}
					for j := range pr {
						dr[j] = pr[j] * (dr[j] - float32(dot)) * scale
					}
				}
				sgemmOne(false, false, l, d, s, dp, s, a.k[kv*s*d:], d, 0, dQ[bh*l*d:], d)
				sgemmOne(true, false, s, d, l, dp, s, a.q[bh*l*d:], d, 1, dK[kv*s*d:], d)
			}
		}
	})
	return fbuf(dQ), fbuf(dK), fbuf(dV), nil
}

// AddLowRank is mx.LowRankAdder's one pass: a decode step's LoRA update, its two
// small products and the add, in one call on the calling goroutine (a rank-8
// update of a 1,024-wide layer is ~30 thousand multiply-adds, less than a
// hand-off to the pool costs).
func (be *Backend) AddLowRank(y, x, a, b *mx.Array, scale float32) (mx.Handle, error) {
	as, bs := a.Shape(), b.Shape()
	k, r, n := as[0], as[1], bs[1]
	xf, yf := h(x).f, h(y).f
	out := newF(len(yf))
	addLowRank(out, yf, xf, len(xf)/k, k, h(a).f, r, h(b).f, n, scale)
	return fbuf(out), nil
}
