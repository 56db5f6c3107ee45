package tokenizer

import (
	"bufio"
	"compress/bzip2"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNFCCases(t *testing.T) {
	tests := []struct{ in, nfc, nfd string }{
		{"plain ascii", "plain ascii", "plain ascii"},
		{"e\u0301", "\u00e9", "e\u0301"},
		{"\u00e9", "\u00e9", "e\u0301"},
		{"\u212b", "\u00c5", "A\u030a"},                     // singleton: ANGSTROM SIGN
		{"q\u0307\u0323", "q\u0323\u0307", "q\u0323\u0307"}, // reordering, no composite
		{"s\u0307\u0323", "\u1e69", "s\u0323\u0307"},        // reordering, then two compositions
		{"\u1100\u1161\u11a8", "\uac01", "\u1100\u1161\u11a8"},
		{"\uac00\u11a8", "\uac01", "\u1100\u1161\u11a8"},
		{"\u0958", "\u0915\u093c", "\u0915\u093c"}, // composition exclusion
		{"日本語 😀", "日本語 😀", "日本語 😀"},
	}
	for _, tt := range tests {
		if got := NFC(tt.in); got != tt.nfc {
			t.Errorf("NFC(%+q) = %+q, want %+q", tt.in, got, tt.nfc)
		}
		if got := NFD(tt.in); got != tt.nfd {
			t.Errorf("NFD(%+q) = %+q, want %+q", tt.in, got, tt.nfd)
		}
	}
}

// normalizationTest is the Unicode conformance file as Debian's unicode-data
// package installs it; scripts/deps.sh installs that package.
const normalizationTest = "/usr/share/unicode/NormalizationTest.txt.bz2"

// TestNormalizationConformance runs the Unicode conformance file. Without it the
// normalizer is held only to the few cases above, which miss bugs the file
// catches (a composition blocked by a mark of the same class), so in CI a
// missing file fails the test; elsewhere it skips.
func TestNormalizationConformance(t *testing.T) {
	f, err := os.Open(normalizationTest)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v: run scripts/deps.sh (apt-get install unicode-data)", err)
		}
		t.Skipf("%v: run scripts/deps.sh (apt-get install unicode-data)", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(bzip2.NewReader(f))
	lines, failures := 0, 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || line[0] == '@' {
			continue
		}
		cols := strings.Split(line, ";")
		if len(cols) < 5 {
			continue
		}
		var c [5]string
		for i := range c {
			c[i] = parseCodePoints(t, cols[i])
		}
		lines++
		check := func(form string, got, want string) {
			if got != want && failures < 20 {
				failures++
				t.Errorf("%s: %s(%+q) = %+q, want %+q", line, form, c[0], got, want)
			}
		}
		for _, i := range []int{0, 1, 2} {
			check("NFC", NFC(c[i]), c[1])
			check("NFD", NFD(c[i]), c[2])
		}
		for _, i := range []int{3, 4} {
			check("NFC", NFC(c[i]), c[3])
			check("NFD", NFD(c[i]), c[4])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines < 10000 {
		t.Fatalf("read only %d test lines", lines)
	}
}

func parseCodePoints(t *testing.T, s string) string {
	var b strings.Builder
	for _, f := range strings.Fields(s) {
		v, err := strconv.ParseUint(f, 16, 32)
		if err != nil {
			t.Fatalf("code point %q: %v", f, err)
		}
		b.WriteRune(rune(v))
	}
	return b.String()
}

// FuzzNFC holds the stretch-by-stretch NFC to normalizing the whole string,
// and checks that NFC and NFD are idempotent and agree with each other.
func FuzzNFC(f *testing.F) {
	for _, s := range []string{"e\u0301", "a\u0323\u0307b\u0301\u0301", "\u1100\u1161\u11a8x", "\u212b\u0958", "日本😀", "\uac00\u11a8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		nfc := NFC(s)
		if whole := string(compose(decompose(s), true)); nfc != whole {
			t.Errorf("NFC(%+q) = %+q, whole-string normalization %+q", s, nfc, whole)
		}
		if again := NFC(nfc); again != nfc {
			t.Errorf("NFC not idempotent on %+q: %+q then %+q", s, nfc, again)
		}
		if NFC(NFD(s)) != nfc {
			t.Errorf("NFC(NFD(%+q)) = %+q, want %+q", s, NFC(NFD(s)), nfc)
		}
	})
}
