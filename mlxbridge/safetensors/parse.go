package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
)

// MaxHeaderSize caps the JSON header. Real headers are kilobytes (a few
// hundred tensors); the cap keeps a hostile length from becoming a huge read.
const MaxHeaderSize = 100 << 20

const metadataKey = "__metadata__"

// parser carries the file path into every error it makes.
type parser struct{ path string }

func (p parser) errorf(tensor string, cause error, format string, args ...any) error {
	return &FormatError{Path: p.path, Tensor: tensor, Problem: fmt.Sprintf(format, args...), Err: cause}
}

// Parse validates a safetensors file held in memory. The File's tensor data
// are views into buf, not copies, so buf must not change while the File is
// in use.
func Parse(buf []byte) (*File, error) { return parser{}.parse(buf) }

func (p parser) parse(buf []byte) (*File, error) {
	if len(buf) < 8 {
		return nil, p.errorf("", nil, "file is %d bytes, shorter than the 8-byte header length", len(buf))
	}
	n := binary.LittleEndian.Uint64(buf)
	if n > MaxHeaderSize {
		return nil, p.errorf("", nil, "header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if n > uint64(len(buf)-8) {
		return nil, p.errorf("", nil, "header length %d runs past the end of the %d-byte file", n, len(buf))
	}
	header := buf[8 : 8+n]
	data := buf[8+n:]
	infos, meta, err := p.parseHeader(header)
	if err != nil {
		return nil, err
	}
	f := &File{path: p.path, buf: buf, data: data, infos: make(map[string]TensorInfo, len(infos)), metadata: meta}
	for _, ti := range infos {
		if _, dup := f.infos[ti.Name]; dup {
			return nil, p.errorf("", nil, "duplicate header key %s", quoteName(ti.Name))
		}
		f.infos[ti.Name] = ti
	}
	if err := p.validateLayout(infos, int64(len(data))); err != nil {
		return nil, err
	}
	f.names = make([]string, len(infos))
	for i, ti := range infos {
		f.names[i] = ti.Name
	}
	slices.Sort(f.names)
	return f, nil
}

// parseHeader reads the JSON header in one pass (see scanner). It walks the
// entries itself rather than decoding into a map: encoding/json's map
// decoding would let a second entry with the same name silently replace the
// first, and a hostile file could use that to show different readers
// different tensors.
func (p parser) parseHeader(header []byte) ([]TensorInfo, map[string]string, error) {
	if !utf8.Valid(header) {
		return nil, nil, p.errorf("", nil, "header is not valid UTF-8")
	}
	if len(header) == 0 || header[0] != '{' {
		return nil, nil, p.errorf("", nil, "header does not start with '{'")
	}
	s := &scanner{b: header, i: 1}
	var (
		// Every entry has a "data_offsets" key, so counting them sizes the
		// list once instead of regrowing it (names holding the text only
		// make it larger, never more than the header's length allows).
		infos   = make([]TensorInfo, 0, bytes.Count(header, []byte(`"data_offsets"`)))
		meta    map[string]string
		hasMeta bool
		scratch = make([]int64, maxRank) // the integers of one shape or data_offsets
	)
	for first := true; ; first = false {
		more, err := s.next('}', first)
		if err != nil {
			return nil, nil, p.errorf("", err, "invalid header JSON")
		}
		if !more {
			break
		}
		key, err := p.key(s, "")
		if err != nil {
			return nil, nil, err
		}
		// Duplicate tensor names are caught by parse, as it indexes them.
		if key == metadataKey {
			if hasMeta {
				return nil, nil, p.errorf("", nil, "duplicate header key %s", quoteName(key))
			}
			hasMeta = true
			if meta, err = p.parseMetadata(s); err != nil {
				return nil, nil, err
			}
			continue
		}
		ti, err := p.parseEntry(s, key, scratch)
		if err != nil {
			return nil, nil, err
		}
		infos = append(infos, ti)
	}
	if !s.atEnd() {
		if c := s.peek(); c == '"' || c == '{' || c == '[' {
			return nil, nil, p.errorf("", nil, "unexpected %s after the header object", s.describe())
		}
		return nil, nil, p.errorf("", s.syntax("after the header object"), "unexpected data after the header object")
	}
	return infos, meta, nil
}

// parseMetadata reads the __metadata__ object, a flat string-to-string map
// (or null, which the reference reads as no metadata).
func (p parser) parseMetadata(s *scanner) (map[string]string, error) {
	if save := s.i; s.peek() == 'n' {
		if w, _ := s.literal(); w == "null" {
			return nil, nil
		}
		s.i = save
	}
	if !s.delim('{') {
		return nil, p.errorf("", nil, "__metadata__ is %s, not an object", s.describe())
	}
	meta := make(map[string]string)
	for first := true; ; first = false {
		more, err := s.next('}', first)
		if err != nil {
			return nil, p.errorf("", err, "invalid header JSON in __metadata__")
		}
		if !more {
			return meta, nil
		}
		key, err := p.key(s, "")
		if err != nil {
			return nil, err
		}
		if _, dup := meta[key]; dup {
			return nil, p.errorf("", nil, "duplicate __metadata__ key %s", quoteName(key))
		}
		if s.peek() != '"' {
			return nil, p.errorf("", nil, "__metadata__ value for key %s is not a string", quoteName(key))
		}
		v, err := s.str()
		if err != nil {
			return nil, p.errorf("", err, "reading __metadata__ key %s", quoteName(key))
		}
		meta[key] = v
	}
}

// parseEntry reads one tensor's {"dtype", "shape", "data_offsets"} object.
// Other fields are skipped, as the reference does.
func (p parser) parseEntry(s *scanner, name string, scratch []int64) (TensorInfo, error) {
	ti := TensorInfo{Name: name}
	if !s.delim('{') {
		return ti, p.delimError(s, name, "entry", '{')
	}
	var offsets [2]int64
	var haveDType, haveShape, haveOffsets bool
	for first := true; ; first = false {
		more, err := s.next('}', first)
		if err != nil {
			return ti, p.errorf(name, err, "invalid header JSON in entry")
		}
		if !more {
			break
		}
		field, err := p.key(s, name)
		if err != nil {
			return ti, err
		}
		dup := false
		switch field {
		case "dtype":
			dup, haveDType = haveDType, true
			if s.peek() != '"' {
				return ti, p.errorf(name, nil, "dtype is %s, not a string", s.describe())
			}
			v, err := s.strBytes()
			if err != nil {
				return ti, p.errorf(name, err, "reading dtype")
			}
			if ti.DType = lookupDType(v); ti.DType == "" {
				return ti, p.errorf(name, nil, "unknown dtype %s", quoteName(string(v)))
			}
		case "shape":
			dup, haveShape = haveShape, true
			dims, err := p.ints(s, name, "shape", scratch)
			if err != nil {
				return ti, err
			}
			ti.Shape = make([]int, len(dims))
			for i, d := range dims {
				if d < 0 {
					return ti, p.errorf(name, nil, "negative dimension %d in shape %v", d, slices.Clone(dims))
				}
				if int64(int(d)) != d {
					return ti, p.errorf(name, nil, "dimension %d does not fit in an int", d)
				}
				ti.Shape[i] = int(d)
			}
		case "data_offsets":
			dup, haveOffsets = haveOffsets, true
			vals, err := p.ints(s, name, "data_offsets", scratch)
			if err != nil {
				return ti, err
			}
			if len(vals) != 2 {
				return ti, p.errorf(name, nil, "data_offsets has %d values, want 2", len(vals))
			}
			offsets = [2]int64{vals[0], vals[1]}
		default:
			if err := s.skip(); err != nil {
				return ti, p.errorf(name, err, "reading field %s", quoteName(field))
			}
		}
		if dup {
			return ti, p.errorf(name, nil, "duplicate field %q", field)
		}
	}
	switch {
	case !haveDType:
		return ti, p.errorf(name, nil, "missing dtype")
	case !haveShape:
		return ti, p.errorf(name, nil, "missing shape")
	case !haveOffsets:
		return ti, p.errorf(name, nil, "missing data_offsets")
	case offsets[0] < 0 || offsets[1] < 0:
		return ti, p.errorf(name, nil, "negative data_offsets %v", offsets)
	}
	ti.Begin, ti.End = offsets[0], offsets[1]
	return ti, nil
}

// ints reads a JSON array of integers, at most maxRank long, into buf, and
// returns the part of buf it filled.
func (p parser) ints(s *scanner, name, what string, buf []int64) ([]int64, error) {
	if !s.delim('[') {
		return nil, p.delimError(s, name, what, '[')
	}
	n := 0
	for first := true; ; first = false {
		more, err := s.next(']', first)
		if err != nil {
			return nil, p.errorf(name, err, "invalid header JSON in %s", what)
		}
		if !more {
			break
		}
		if n == maxRank {
			return nil, p.errorf(name, nil, "%s has more than %d values", what, maxRank)
		}
		if c := s.peek(); c != '-' && (c < '0' || c > '9') {
			return nil, p.errorf(name, nil, "%s holds %s, not an integer", what, s.describe())
		}
		num, err := s.num()
		if err != nil {
			return nil, p.errorf(name, err, "invalid header JSON in %s", what)
		}
		v, ok := parseInt64(num)
		if !ok {
			return nil, p.errorf(name, nil, "%s holds %s, not a 64-bit integer", what, tokString(string(num)))
		}
		buf[n] = v
		n++
	}
	return buf[:n], nil
}

// parseInt64 reads a JSON number's text as an int64; a fraction, an exponent
// or a value out of range is not one.
func parseInt64(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' || u > (math.MaxUint64-9)/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case !neg && u <= math.MaxInt64:
		return int64(u), true
	case neg && u <= 1<<63:
		return int64(-u), true
	}
	return 0, false
}

// key reads an object key and the colon after it.
func (p parser) key(s *scanner, tensor string) (string, error) {
	k, err := s.str()
	if err == nil {
		err = s.colon()
	}
	if err != nil {
		return "", p.errorf(tensor, err, "invalid header JSON")
	}
	return k, nil
}

// delimError reports that what does not open with want.
func (p parser) delimError(s *scanner, tensor, what string, want byte) error {
	if s.atEnd() {
		return p.errorf(tensor, errEnd, "invalid header JSON in %s", what)
	}
	return p.errorf(tensor, nil, "%s: got %s, want %q", what, s.describe(), string(want))
}

// validateLayout checks each tensor's byte range against its dtype and
// shape, then that the ranges tile [0, dataLen) with no overlap, hole or
// trailing bytes — the reference rejects all three, and a file it rejects
// must not load here either.
func (p parser) validateLayout(infos []TensorInfo, dataLen int64) error {
	for _, ti := range infos {
		want, ok := byteSize(ti.Shape, ti.DType)
		if !ok {
			return p.errorf(ti.Name, nil, "shape %v overflows the element count", ti.Shape)
		}
		switch {
		case ti.Begin > ti.End:
			return p.errorf(ti.Name, nil, "data_offsets begin %d > end %d", ti.Begin, ti.End)
		case ti.End > dataLen:
			return p.errorf(ti.Name, nil, "data_offsets end %d is beyond the %d-byte data region", ti.End, dataLen)
		case ti.End-ti.Begin != want:
			return p.errorf(ti.Name, nil, "data_offsets span %d bytes, but %s%v needs %d", ti.End-ti.Begin, ti.DType, ti.Shape, want)
		}
	}
	order := make([]int32, len(infos)) // sorting indices moves 4 bytes per swap, not 72
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(i, j int32) int {
		a, b := &infos[i], &infos[j]
		if c := cmp.Compare(a.Begin, b.Begin); c != 0 {
			return c
		}
		return cmp.Compare(a.End, b.End)
	})
	var pos int64
	prev := ""
	for _, k := range order {
		ti := &infos[k]
		if ti.Begin < pos {
			return p.errorf(ti.Name, nil, "data_offsets [%d,%d] overlap tensor %s, which ends at %d", ti.Begin, ti.End, quoteName(prev), pos)
		}
		if ti.Begin > pos {
			return p.errorf(ti.Name, nil, "data_offsets [%d,%d] leave a hole: no tensor covers bytes [%d,%d)", ti.Begin, ti.End, pos, ti.Begin)
		}
		pos, prev = ti.End, ti.Name
	}
	if pos != dataLen {
		return p.errorf("", nil, "%d trailing bytes after the last tensor (tensors cover %d of %d bytes)", dataLen-pos, pos, dataLen)
	}
	return nil
}

// tokString renders a number's text for an error message. Numbers in a
// hostile header can be megabytes long, so only their start is shown.
func tokString(num string) string {
	if len(num) > maxNameInErr {
		return num[:maxNameInErr] + "..."
	}
	return num
}
