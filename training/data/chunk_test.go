package data

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func chunkTexts(t *testing.T, tok Tokenizer, text string, size, overlap int) []string {
	t.Helper()
	chunks, err := chunkDocument(tok, "doc.txt", text, ChunkOptions{Size: size, Overlap: overlap})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, c := range chunks {
		if c.ID != fmt.Sprintf("doc.txt#%d", i) || c.Index != i || c.File != "doc.txt" {
			t.Errorf("chunk %d named %q (%s, %d)", i, c.ID, c.File, c.Index)
		}
		out = append(out, decode(c.Tokens))
	}
	return out
}

func TestChunkBoundaries(t *testing.T) {
	tests := []struct {
		name          string
		text          string
		size, overlap int
		want          []string
	}{
		{"no breaks: stride is size-overlap", "abcdefghijklmnopqrstuvwxyz", 10, 3,
			[]string{"abcdefghij", "hijklmnopq", "opqrstuvwx", "vwxyz"}},
		{"no overlap", "abcdefghij", 4, 0, []string{"abcd", "efgh", "ij"}},
		{"fits in one", "short.", 10, 2, []string{"short."}},
		{"sentence end", "One two. Three four. Five six.", 22, 2,
			[]string{"One two. Three four.", "r. Five six."}},
		{"paragraph beats a later sentence end", "One two. Three four.\n\nFive six. Seven.", 34, 4,
			[]string{"One two. Three four.\n\n", "r.\n\nFive six. Seven."}},
		{"line end beats a sentence end", "a = 1. b = 2\nc = 3. d = 4\ne = 5", 20, 2,
			[]string{"a = 1. b = 2\n", "2\nc = 3. d = 4\ne = 5"}}, // the line end at 13 wins over the sentence end at 19
		{"a break too early is not taken", "Hi. abcdefghijklmnop", 10, 2,
			[]string{"Hi. abcdef", "efghijklmn", "mnop"}},
	}
	for _, tt := range tests {
		for _, tok := range []Tokenizer{&byteTokenizer{}, &offsetTokenizer{}} {
			t.Run(fmt.Sprintf("%s/%T", tt.name, tok), func(t *testing.T) {
				got := chunkTexts(t, tok, tt.text, tt.size, tt.overlap)
				if !equal(got, tt.want) {
					t.Errorf("got %q, want %q", got, tt.want)
				}
			})
		}
	}
}

// Whatever the text, consecutive chunks share exactly the overlap, no chunk
// is over size, and dropping each chunk's overlap gives the document back.
func TestChunkOverlapExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"alpha", "beta.", "gamma!", "delta\n", "\n\n", "eps?", "x", " ", "zeta"}
	for trial := range 200 {
		var b strings.Builder
		for range r.IntN(300) {
			b.WriteString(words[r.IntN(len(words))])
			if r.IntN(2) == 0 {
				b.WriteByte(' ')
			}
		}
		text := b.String()
		size := 2 + r.IntN(40)
		overlap := r.IntN(size)
		pieces, err := chunkDocument(&byteTokenizer{}, "d", text, ChunkOptions{Size: size, Overlap: overlap})
		if text == "" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		offsets, err := chunkDocument(&offsetTokenizer{}, "d", text, ChunkOptions{Size: size, Overlap: overlap})
		if err != nil {
			t.Fatal(err)
		}
		rebuilt := decode(pieces[0].Tokens)
		for i, c := range pieces {
			if len(c.Tokens) > size {
				t.Fatalf("trial %d: chunk %d has %d tokens, over %d", trial, i, len(c.Tokens), size)
			}
			if decode(c.Tokens) != decode(offsets[i].Tokens) {
				t.Fatalf("trial %d: chunk %d differs between sentence-wise and offset tokenization", trial, i)
			}
			if i == 0 {
				continue
			}
			prev := pieces[i-1].Tokens
			if got, want := decode(c.Tokens[:overlap]), decode(prev[len(prev)-overlap:]); got != want {
				t.Fatalf("trial %d (size %d, overlap %d): chunk %d starts %q, want the previous chunk's last %q", trial, size, overlap, i, got, want)
			}
			rebuilt += decode(c.Tokens[overlap:])
		}
		if rebuilt != text || len(offsets) != len(pieces) {
			t.Fatalf("trial %d: chunks rebuild %q, want %q", trial, rebuilt, text)
		}
	}
}

func TestChunkOptionsValidated(t *testing.T) {
	for _, o := range []ChunkOptions{{Size: 4, Overlap: 4}, {Size: 4, Overlap: -1}, {Size: -1}} {
		if _, err := NewCorpus(t.TempDir(), &byteTokenizer{}, o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

func TestIsDocument(t *testing.T) {
	for name, want := range map[string]bool{
		"notes.md": true, "a.TXT": true, "main.go": true, "page.html": true, "data.csv": true, "x.org": true,
		"photo.png": true, "README": true, "LICENSE": true, "report.pdf": true, "archive.zip": true,
		"notes.md~": false, ".notes.md": false, ".notes.md.swp": false, "#notes.md#": false, "notes.md.tmp": false,
		"~$report.docx": false,
	} {
		if got := IsDocument(name); got != want {
			t.Errorf("IsDocument(%q) = %v, want %v", name, got, want)
		}
	}
}
