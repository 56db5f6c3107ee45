package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/inloop/inloop/internal/atomicfile"
)

// Tensor is one tensor to write: its raw little-endian bytes and how to
// read them.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// Encode writes tensors and metadata in the safetensors format, byte for
// byte as the reference writer lays them out: tensors back to back, widest
// dtype first and by name within a dtype, after a compact JSON header padded
// with spaces to a multiple of 8 bytes. That order keeps every tensor's data
// aligned to its element size in the file, so a mapped F32 tensor can be
// viewed as float32s without a copy. Every tensor's Data must be exactly
// numel*dtype.Size() bytes; nothing is written if a tensor is invalid.
func Encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	header, order, err := buildHeader(tensors, metadata)
	if err != nil {
		return err
	}
	if _, err := w.Write(header); err != nil {
		return fmt.Errorf("safetensors: write header: %w", err)
	}
	for _, t := range order {
		if _, err := w.Write(t.Data); err != nil {
			return fmt.Errorf("safetensors: write tensor %s: %w", quoteName(t.Name), err)
		}
	}
	return nil
}

// buildHeader validates the tensors and returns the 8-byte length followed
// by the padded JSON header, and the tensors in file order.
func buildHeader(tensors []Tensor, metadata map[string]string) ([]byte, []Tensor, error) {
	order := slices.Clone(tensors)
	slices.SortFunc(order, func(a, b Tensor) int {
		if c := cmp.Compare(writeRank[b.DType], writeRank[a.DType]); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	seen := make(map[string]bool, len(order))
	for _, t := range order {
		if seen[t.Name] {
			return nil, nil, fmt.Errorf("safetensors: tensor %s: duplicate name", quoteName(t.Name))
		}
		seen[t.Name] = true
	}
	var b bytes.Buffer
	b.Write(make([]byte, 8)) // length, filled in below
	b.WriteByte('{')
	if len(metadata) > 0 {
		b.WriteString(`"__metadata__":{`)
		for i, k := range slices.Sorted(maps.Keys(metadata)) {
			v := metadata[k]
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, nil, fmt.Errorf("safetensors: metadata key %s: key or value is not valid UTF-8", quoteName(k))
			}
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(&b, k)
			b.WriteByte(':')
			writeJSONString(&b, v)
		}
		b.WriteByte('}')
	}
	var offset int64
	for i, t := range order {
		if err := checkTensor(t); err != nil {
			return nil, nil, err
		}
		if i > 0 || len(metadata) > 0 {
			b.WriteByte(',')
		}
		writeJSONString(&b, t.Name)
		b.WriteString(`:{"dtype":`)
		writeJSONString(&b, string(t.DType))
		b.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(d))
		}
		end := offset + int64(len(t.Data))
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, offset, end)
		offset = end
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	out := b.Bytes()
	if len(out)-8 > MaxHeaderSize {
		return nil, nil, fmt.Errorf("safetensors: header is %d bytes, over the %d-byte limit readers accept", len(out)-8, MaxHeaderSize)
	}
	binary.LittleEndian.PutUint64(out, uint64(len(out)-8))
	return out, order, nil
}

// writeRank is the reference's dtype order (increasing alignment); the
// writer sorts by it, descending. Ties within a size follow it too, so the
// output matches the reference's byte for byte.
var writeRank = map[DType]int{
	DTypeBool: 1, DTypeU8: 2, DTypeI8: 3, DTypeF8E5M2: 4, DTypeF8E4M3: 5,
	DTypeI16: 6, DTypeU16: 7, DTypeF16: 8, DTypeBF16: 9,
	DTypeI32: 10, DTypeU32: 11, DTypeF32: 12,
	DTypeF64: 13, DTypeI64: 14, DTypeU64: 15,
}

func checkTensor(t Tensor) error {
	name := quoteName(t.Name)
	switch {
	case t.Name == metadataKey:
		return fmt.Errorf("safetensors: tensor %s: the name is reserved for metadata", name)
	case !utf8.ValidString(t.Name):
		return fmt.Errorf("safetensors: tensor %s: name is not valid UTF-8", name)
	case t.DType.Size() == 0:
		return fmt.Errorf("safetensors: tensor %s: unknown dtype %q", name, t.DType)
	case len(t.Shape) > maxRank:
		return fmt.Errorf("safetensors: tensor %s: %d dimensions, more than readers accept (%d)", name, len(t.Shape), maxRank)
	}
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("safetensors: tensor %s: negative dimension in shape %v", name, t.Shape)
		}
	}
	want, ok := byteSize(t.Shape, t.DType)
	if !ok {
		return fmt.Errorf("safetensors: tensor %s: shape %v overflows the element count", name, t.Shape)
	}
	if int64(len(t.Data)) != want {
		return fmt.Errorf("safetensors: tensor %s: %d bytes of data, but %s%v needs %d", name, len(t.Data), t.DType, t.Shape, want)
	}
	return nil
}

// writeJSONString quotes s the way serde_json does: only '"', '\\' and
// control characters are escaped, so names round-trip byte for byte with
// the reference writer (encoding/json would also escape <, > and &).
func writeJSONString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xF])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// WriteFile writes the tensors to path atomically (internal/atomicfile), so a
// crash leaves either the old file or the complete new one.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	header, order, err := buildHeader(tensors, metadata)
	if err != nil {
		return err
	}
	err = atomicfile.WriteFunc(path, 0o644, func(w io.Writer) error {
		if _, err := w.Write(header); err != nil {
			return err
		}
		for _, t := range order {
			if _, err := w.Write(t.Data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}
