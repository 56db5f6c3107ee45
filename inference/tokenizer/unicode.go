package tokenizer

import (
	"sort"
	"sync"
	"unicode/utf8"
)

//go:generate go run gen_unicode.go -ucd /usr/share/unicode

// Unicode canonical normalization (UAX #15), forms NFC and NFD, from the
// generated tables in unicode_tables.go. Qwen's tokenizer.json starts with an
// NFC normalizer, so every encode runs through here; almost all text is already
// in NFC, which a quick check over the string proves without allocating.

type cccRun struct {
	lo, hi rune
	ccc    uint8
}

// Hangul syllables compose and decompose arithmetically (Unicode 3.12).
const (
	hangulSBase  = 0xAC00
	hangulLBase  = 0x1100
	hangulVBase  = 0x1161
	hangulTBase  = 0x11A7
	hangulLCount = 19
	hangulVCount = 21
	hangulTCount = 28
	hangulNCount = hangulVCount * hangulTCount
	hangulSCount = hangulLCount * hangulNCount
)

type normTables struct {
	decomp  map[rune][]rune   // full canonical decomposition
	compose map[uint64]rune   // primary composites by (first<<32 | second)
	unsafe  map[rune]struct{} // code points that can make a string not NFC
}

var (
	normOnce sync.Once
	norm     normTables
)

func tables() *normTables {
	normOnce.Do(buildNormTables)
	return &norm
}

func buildNormTables() {
	single := make(map[rune][]rune, len(canonicalPairs)+len(canonicalSingletons))
	for _, p := range canonicalPairs {
		single[p[0]] = []rune{p[1], p[2]}
	}
	for _, p := range canonicalSingletons {
		single[p[0]] = []rune{p[1]}
	}
	norm.decomp = make(map[rune][]rune, len(single))
	var full func(r rune) []rune
	full = func(r rune) []rune {
		d, ok := single[r]
		if !ok {
			return []rune{r}
		}
		var out []rune
		for _, c := range d {
			out = append(out, full(c)...)
		}
		return out
	}
	for r := range single {
		norm.decomp[r] = full(r)
	}

	excluded := make(map[rune]bool, len(compositionExclusions))
	for _, r := range compositionExclusions {
		excluded[r] = true
	}
	norm.compose = make(map[uint64]rune, len(canonicalPairs))
	norm.unsafe = make(map[rune]struct{})
	for _, p := range canonicalPairs {
		// A composite is left out of NFC when excluded by name or when it, or the
		// first code point of its decomposition, is not a starter.
		if excluded[p[0]] || combiningClass(p[0]) != 0 || combiningClass(p[1]) != 0 {
			norm.unsafe[p[0]] = struct{}{}
			continue
		}
		norm.compose[uint64(p[1])<<32|uint64(p[2])] = p[0]
		norm.unsafe[p[2]] = struct{}{} // may combine with what precedes it
	}
	for _, p := range canonicalSingletons {
		norm.unsafe[p[0]] = struct{}{}
	}
	for _, r := range cccRuns {
		for c := r.lo; c <= r.hi; c++ {
			norm.unsafe[c] = struct{}{}
		}
	}
	for c := rune(hangulVBase); c < hangulVBase+hangulVCount; c++ {
		norm.unsafe[c] = struct{}{}
	}
	for c := rune(hangulTBase + 1); c < hangulTBase+hangulTCount; c++ {
		norm.unsafe[c] = struct{}{}
	}
}

// combiningClass returns the canonical combining class of r.
func combiningClass(r rune) uint8 {
	if r < 0x300 {
		return 0
	}
	i := sort.Search(len(cccRuns), func(i int) bool { return cccRuns[i].hi >= r })
	if i < len(cccRuns) && cccRuns[i].lo <= r {
		return cccRuns[i].ccc
	}
	return 0
}

// nfcSafe reports whether r is NFC-stable and blocks composition across it:
// a starter that neither decomposes nor combines with what precedes it. Every
// code point below U+0300 is.
func nfcSafe(t *normTables, r rune) bool {
	if r < 0x300 {
		return true
	}
	_, unsafe := t.unsafe[r]
	return !unsafe
}

// nextUnsafe returns the index of the first code point at or after i that is
// not nfcSafe, or len(s).
func nextUnsafe(t *normTables, s string, i int) int {
	for i < len(s) {
		if s[i] < 0xCC { // lead bytes below 0xCC start code points below U+0300
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if !nfcSafe(t, r) {
			return i
		}
		i += w
	}
	return i
}

// NFC returns s in Unicode Normalization Form C. Text already in NFC (almost
// all text) is returned as it is after one scan; otherwise only the stretches
// around the code points that need it are normalized.
func NFC(s string) string {
	t := tables()
	i := nextUnsafe(t, s, 0)
	if i == len(s) {
		return s
	}
	out := make([]byte, 0, len(s)+8)
	done := 0 // s[:done] is in out
	for i < len(s) {
		// The stretch starts at the safe starter before i (it may compose with
		// what follows) and ends at the next safe code point.
		start := i
		if r, w := utf8.DecodeLastRuneInString(s[done:i]); w > 0 && nfcSafe(t, r) {
			start = i - w
		}
		end := i
		for end < len(s) {
			r, w := utf8.DecodeRuneInString(s[end:])
			if nfcSafe(t, r) {
				break
			}
			end += w
		}
		out = append(out, s[done:start]...)
		out = append(out, compose(decompose(s[start:end]), true)...)
		done = end
		i = nextUnsafe(t, s, end)
	}
	out = append(out, s[done:]...)
	return string(out)
}

// NFD returns s in Unicode Normalization Form D.
func NFD(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return string(compose(decompose(s), false))
		}
	}
	return s
}

// decompose returns the canonical decomposition of s in canonical order.
func decompose(s string) []rune {
	t := tables()
	out := make([]rune, 0, len(s))
	for _, r := range s {
		switch {
		case r >= hangulSBase && r < hangulSBase+hangulSCount:
			si := r - hangulSBase
			out = append(out, hangulLBase+si/hangulNCount, hangulVBase+(si%hangulNCount)/hangulTCount)
			if ti := si % hangulTCount; ti != 0 {
				out = append(out, hangulTBase+ti)
			}
		default:
			if d, ok := t.decomp[r]; ok {
				out = append(out, d...)
			} else {
				out = append(out, r)
			}
		}
	}
	// Canonical ordering: a stable sort by class of each run of non-starters.
	for i := 0; i < len(out); {
		if combiningClass(out[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(out) && combiningClass(out[j]) != 0 {
			j++
		}
		if j-i > 1 {
			run := out[i:j]
			sort.SliceStable(run, func(a, b int) bool { return combiningClass(run[a]) < combiningClass(run[b]) })
		}
		i = j
	}
	return out
}

// compose applies canonical composition (if recompose) in place to a
// decomposed, ordered sequence and returns it as UTF-8.
func compose(rs []rune, recompose bool) []byte {
	if !recompose {
		return []byte(string(rs))
	}
	t := tables()
	starter := -1    // index in out of the last starter
	var lastCCC byte // class of the last code point kept after the starter
	out := rs[:0]
	for _, r := range rs {
		ccc := combiningClass(r)
		if starter >= 0 {
			// r is blocked from the starter when something between them has class 0
			// or a class not lower than r's.
			adjacent := starter == len(out)-1
			if adjacent || (lastCCC != 0 && lastCCC < ccc) {
				if c, ok := composePair(t, out[starter], r); ok {
					out[starter] = c
					continue
				}
			}
		}
		if ccc == 0 {
			starter = len(out)
			lastCCC = 0
		} else {
			lastCCC = ccc
		}
		out = append(out, r)
	}
	b := make([]byte, 0, len(out)*3)
	for _, r := range out {
		b = utf8.AppendRune(b, r)
	}
	return b
}

func composePair(t *normTables, a, b rune) (rune, bool) {
	// Hangul L+V and LV+T.
	if a >= hangulLBase && a < hangulLBase+hangulLCount && b >= hangulVBase && b < hangulVBase+hangulVCount {
		return hangulSBase + ((a-hangulLBase)*hangulVCount+(b-hangulVBase))*hangulTCount, true
	}
	if a >= hangulSBase && a < hangulSBase+hangulSCount && (a-hangulSBase)%hangulTCount == 0 &&
		b > hangulTBase && b < hangulTBase+hangulTCount {
		return a + (b - hangulTBase), true
	}
	c, ok := t.compose[uint64(a)<<32|uint64(b)]
	return c, ok
}
