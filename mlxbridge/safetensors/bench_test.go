package safetensors

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkOpen opens a ~100 MB file. With the file mapped, the cost is the
// header parse and does not grow with the data; compare BenchmarkReadAll.
func BenchmarkOpen(b *testing.B) {
	path := writeBenchFile(b)
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkOpenTouchAll also reads every tensor's bytes once, the cost a
// loader that decodes every weight pays on top of Open.
func BenchmarkOpenTouchAll(b *testing.B) {
	path := writeBenchFile(b)
	b.SetBytes(100 << 20)
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		var sum byte
		for _, name := range f.Names() {
			data, _ := f.Data(name)
			for i := 0; i < len(data); i += 4096 {
				sum += data[i]
			}
		}
		f.Close()
	}
}

func writeBenchFile(b *testing.B) string {
	b.Helper()
	const tensors, perTensor = 100, 1 << 20 // 100 × 1 MiB
	var ts []Tensor
	data := fill(perTensor, 1)
	for i := range tensors {
		ts = append(ts, Tensor{Name: fmt.Sprintf("model.layers.%d.weight", i), DType: DTypeBF16, Shape: []int{512, 1024}, Data: data})
	}
	path := filepath.Join(b.TempDir(), "model.safetensors")
	if err := WriteFile(path, ts, map[string]string{"format": "mlx"}); err != nil {
		b.Fatal(err)
	}
	return path
}

func BenchmarkParseHeader(b *testing.B) {
	var ts []Tensor
	for i := range 1000 {
		ts = append(ts, Tensor{Name: fmt.Sprintf("model.layers.%d.mlp.down_proj.weight", i), DType: DTypeF32, Shape: []int{1, 1}, Data: make([]byte, 4)})
	}
	var buf bytes.Buffer
	if err := Encode(&buf, ts, nil); err != nil {
		b.Fatal(err)
	}
	raw := buf.Bytes()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseHeader100k parses the header of a valid but adversarial file:
// 100,000 one-element tensors (a ~7 MB header). Opening it must stay linear in
// the header and lean in memory: well under a second and 100 MB.
func BenchmarkParseHeader100k(b *testing.B) {
	raw := manyTensors(b, 100_000)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// manyTensors encodes n one-element F32 tensors with model-like names.
func manyTensors(tb testing.TB, n int) []byte {
	tb.Helper()
	ts := make([]Tensor, n)
	four := make([]byte, 4)
	for i := range ts {
		ts[i] = Tensor{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.down_proj.weight", i/1000, i%1000), DType: DTypeF32, Shape: []int{1, 1}, Data: four}
	}
	var buf bytes.Buffer
	if err := Encode(&buf, ts, map[string]string{"format": "pt"}); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func BenchmarkFloat32sBF16(b *testing.B) {
	raw := fill(2<<20, 3)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Float32s(DTypeBF16, raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeFloat32sF16(b *testing.B) {
	v := make([]float32, 1<<20)
	for i := range v {
		v[i] = float32(i) * 0.001
	}
	b.SetBytes(int64(4 * len(v)))
	for b.Loop() {
		if _, err := EncodeFloat32s(DTypeF16, v); err != nil {
			b.Fatal(err)
		}
	}
}
