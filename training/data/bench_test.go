package data

import (
	"strings"
	"testing"
)

func BenchmarkBatcherNext(b *testing.B) {
	exs := randomExamples(1024)
	bt, err := NewBatcher(exs, BatchOptions{BatchSize: 8, MaxSeqLen: 512, Shuffle: true, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		bt.Next()
	}
}

func BenchmarkChunkDocument(b *testing.B) {
	text := strings.Repeat("A sentence of some length, like this one. Another follows it!\n\nA new paragraph.\n", 2000)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := chunkDocument(&byteTokenizer{}, "d.md", text, ChunkOptions{Size: 512, Overlap: 64}); err != nil {
			b.Fatal(err)
		}
	}
}
