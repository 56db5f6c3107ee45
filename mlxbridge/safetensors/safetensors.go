// Package safetensors reads and writes the Hugging Face safetensors format,
// the file format of nearly every model and adapter Inloop loads or saves.
//
// Model files come from anywhere — a download, a USB stick, a folder the user
// picked — so the reader treats every byte as hostile: the header length is
// capped, the JSON header is read in one linear pass (so duplicate keys are
// caught rather than silently overwritten), every dtype, shape and offset is
// checked with overflow-safe arithmetic, and the tensors must tile the data
// region exactly, as the reference implementation requires. A malformed file
// gives an error wrapping ErrFormat; it never panics and never allocates from
// a length it has not checked against the file's real size.
//
// Open maps the file into memory, so opening costs O(header) and tensor data
// is paged in only when read. Data returns views into that mapping: they are
// read-only and valid until Close. (As with any mapped file, truncating the
// file on disk while it is open makes later reads fault.)
//
// Encode and WriteFile produce the bytes the reference writer would: tensors
// back to back, widest dtype first so each stays aligned, and the header
// padded with spaces to a multiple of 8 bytes.
package safetensors

import (
	"errors"
	"math/bits"
	"strconv"
	"strings"
)

// DType names an element type exactly as the safetensors header spells it.
type DType string

// The element types the format defines. The 8-bit floats are accepted so
// their raw bytes can be read; Float32s does not decode them.
const (
	DTypeBool   DType = "BOOL"
	DTypeU8     DType = "U8"
	DTypeI8     DType = "I8"
	DTypeF8E4M3 DType = "F8_E4M3"
	DTypeF8E5M2 DType = "F8_E5M2"
	DTypeI16    DType = "I16"
	DTypeU16    DType = "U16"
	DTypeF16    DType = "F16"
	DTypeBF16   DType = "BF16"
	DTypeI32    DType = "I32"
	DTypeU32    DType = "U32"
	DTypeF32    DType = "F32"
	DTypeF64    DType = "F64"
	DTypeI64    DType = "I64"
	DTypeU64    DType = "U64"
)

const (
	// maxRank bounds the dimensions per tensor, and so what one header
	// entry can make the parser allocate. No real tensor comes close; the
	// reference has no such limit.
	maxRank = 64
	// maxNameInErr bounds how much of a name an error quotes: names in a
	// hostile header can be megabytes long.
	maxNameInErr = 80
)

var dtypeSizes = map[DType]int{
	DTypeBool: 1, DTypeU8: 1, DTypeI8: 1, DTypeF8E4M3: 1, DTypeF8E5M2: 1,
	DTypeI16: 2, DTypeU16: 2, DTypeF16: 2, DTypeBF16: 2,
	DTypeI32: 4, DTypeU32: 4, DTypeF32: 4,
	DTypeF64: 8, DTypeI64: 8, DTypeU64: 8,
}

// lookupDType returns the known dtype spelled b, or "" (without making a
// string of b: a header names one per tensor).
func lookupDType(b []byte) DType {
	for d := range dtypeSizes {
		if string(b) == string(d) {
			return d
		}
	}
	return ""
}

// Size is the number of bytes per element, or 0 for a dtype this package
// does not know.
func (d DType) Size() int { return dtypeSizes[d] }

// DTypes lists every dtype this package knows, narrowest first.
func DTypes() []DType {
	return []DType{DTypeBool, DTypeU8, DTypeI8, DTypeF8E4M3, DTypeF8E5M2,
		DTypeI16, DTypeU16, DTypeF16, DTypeBF16, DTypeI32, DTypeU32, DTypeF32,
		DTypeF64, DTypeI64, DTypeU64}
}

// TensorInfo describes one tensor of a file. Begin and End are byte offsets
// into the data region (which starts right after the header), End exclusive.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int
	Begin int64
	End   int64
}

// NumElements is the product of the shape (1 for a scalar).
func (ti TensorInfo) NumElements() int64 {
	n, _ := numElements(ti.Shape)
	return n
}

var (
	// ErrFormat is wrapped by every error that reports a malformed file,
	// so callers can tell a bad model file from an I/O failure.
	ErrFormat = errors.New("safetensors: malformed file")
	// ErrNotFound reports a tensor name the file or set does not hold.
	ErrNotFound = errors.New("safetensors: no such tensor")
	// ErrClosed reports use of a File or Set after Close.
	ErrClosed = errors.New("safetensors: file closed")
)

// FormatError reports what is wrong with a file, and where.
type FormatError struct {
	Path    string // file path; empty for Parse
	Tensor  string // tensor name, when the problem is in one tensor's entry
	Problem string
	Err     error // underlying cause, e.g. a JSON syntax error; may be nil
}

func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString("safetensors: ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	if e.Tensor != "" {
		b.WriteString("tensor ")
		b.WriteString(quoteName(e.Tensor))
		b.WriteString(": ")
	}
	b.WriteString(e.Problem)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *FormatError) Unwrap() error { return e.Err }

// Is makes every FormatError match ErrFormat.
func (e *FormatError) Is(target error) bool { return target == ErrFormat }

// quoteName quotes a name for an error message, cut short if it is long.
func quoteName(s string) string {
	if len(s) <= maxNameInErr {
		return strconv.Quote(s)
	}
	cut := maxNameInErr
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// numElements multiplies out a shape, reporting false on a negative
// dimension or on overflow of int64.
func numElements(shape []int) (int64, bool) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > 1<<63-1 {
			return 0, false
		}
		n = lo
	}
	return int64(n), true
}

// byteSize is numel*size for a shape and dtype, reporting false on overflow.
func byteSize(shape []int, dt DType) (int64, bool) {
	n, ok := numElements(shape)
	if !ok {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(n), uint64(dt.Size()))
	if hi != 0 || lo > 1<<63-1 {
		return 0, false
	}
	return int64(lo), true
}
