package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
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
	if err := p.validateLayout(infos, int64(len(data))); err != nil {
		return nil, err
	}
	f := &File{path: p.path, buf: buf, data: data, infos: make(map[string]TensorInfo, len(infos)), metadata: meta}
	for _, ti := range infos {
		f.infos[ti.Name] = ti
		f.names = append(f.names, ti.Name)
	}
	slices.Sort(f.names)
	return f, nil
}

// parseHeader walks the JSON header token by token: encoding/json's map
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
	dec := json.NewDecoder(bytes.NewReader(header))
	dec.UseNumber()
	if err := p.expectDelim(dec, '{', "", "header"); err != nil {
		return nil, nil, err
	}
	var (
		infos []TensorInfo
		meta  map[string]string
		seen  = make(map[string]bool)
	)
	for dec.More() {
		key, err := p.key(dec, "")
		if err != nil {
			return nil, nil, err
		}
		if seen[key] {
			return nil, nil, p.errorf("", nil, "duplicate header key %s", quoteName(key))
		}
		seen[key] = true
		if key == metadataKey {
			if meta, err = p.parseMetadata(dec); err != nil {
				return nil, nil, err
			}
			continue
		}
		ti, err := p.parseEntry(dec, key)
		if err != nil {
			return nil, nil, err
		}
		infos = append(infos, ti)
	}
	if err := p.expectDelim(dec, '}', "", "header"); err != nil {
		return nil, nil, err
	}
	if tok, err := dec.Token(); err == nil {
		return nil, nil, p.errorf("", nil, "unexpected %s after the header object", tokString(tok))
	} else if err != io.EOF {
		return nil, nil, p.errorf("", err, "unexpected data after the header object")
	}
	return infos, meta, nil
}

// parseMetadata reads the __metadata__ object, a flat string-to-string map
// (or null, which the reference reads as no metadata).
func (p parser) parseMetadata(dec *json.Decoder) (map[string]string, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, p.errorf("", err, "reading __metadata__")
	}
	if tok == nil {
		return nil, nil
	}
	if tok != json.Delim('{') {
		return nil, p.errorf("", nil, "__metadata__ is %s, not an object", tokString(tok))
	}
	meta := make(map[string]string)
	for dec.More() {
		key, err := p.key(dec, "")
		if err != nil {
			return nil, err
		}
		if _, dup := meta[key]; dup {
			return nil, p.errorf("", nil, "duplicate __metadata__ key %s", quoteName(key))
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, p.errorf("", err, "reading __metadata__ key %s", quoteName(key))
		}
		v, ok := tok.(string)
		if !ok {
			return nil, p.errorf("", nil, "__metadata__ value for key %s is not a string", quoteName(key))
		}
		meta[key] = v
	}
	return meta, p.expectDelim(dec, '}', "", "__metadata__")
}

// parseEntry reads one tensor's {"dtype", "shape", "data_offsets"} object.
// Other fields are skipped, as the reference does.
func (p parser) parseEntry(dec *json.Decoder, name string) (TensorInfo, error) {
	ti := TensorInfo{Name: name}
	if err := p.expectDelim(dec, '{', name, "entry"); err != nil {
		return ti, err
	}
	var offsets []int64
	var haveDType, haveShape bool
	for dec.More() {
		field, err := p.key(dec, name)
		if err != nil {
			return ti, err
		}
		dup := false
		switch field {
		case "dtype":
			dup, haveDType = haveDType, true
			tok, err := dec.Token()
			if err != nil {
				return ti, p.errorf(name, err, "reading dtype")
			}
			s, ok := tok.(string)
			if !ok {
				return ti, p.errorf(name, nil, "dtype is %s, not a string", tokString(tok))
			}
			if ti.DType = DType(s); ti.DType.Size() == 0 {
				return ti, p.errorf(name, nil, "unknown dtype %s", quoteName(s))
			}
		case "shape":
			dup, haveShape = haveShape, true
			dims, err := p.ints(dec, name, "shape")
			if err != nil {
				return ti, err
			}
			ti.Shape = make([]int, len(dims))
			for i, d := range dims {
				if d < 0 {
					return ti, p.errorf(name, nil, "negative dimension %d in shape %v", d, dims)
				}
				if int64(int(d)) != d {
					return ti, p.errorf(name, nil, "dimension %d does not fit in an int", d)
				}
				ti.Shape[i] = int(d)
			}
		case "data_offsets":
			dup = offsets != nil
			if offsets, err = p.ints(dec, name, "data_offsets"); err != nil {
				return ti, err
			}
			if offsets == nil {
				offsets = []int64{}
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return ti, p.errorf(name, err, "reading field %s", quoteName(field))
			}
		}
		if dup {
			return ti, p.errorf(name, nil, "duplicate field %q", field)
		}
	}
	if err := p.expectDelim(dec, '}', name, "entry"); err != nil {
		return ti, err
	}
	switch {
	case !haveDType:
		return ti, p.errorf(name, nil, "missing dtype")
	case !haveShape:
		return ti, p.errorf(name, nil, "missing shape")
	case offsets == nil:
		return ti, p.errorf(name, nil, "missing data_offsets")
	case len(offsets) != 2:
		return ti, p.errorf(name, nil, "data_offsets has %d values, want 2", len(offsets))
	case offsets[0] < 0 || offsets[1] < 0:
		return ti, p.errorf(name, nil, "negative data_offsets %v", offsets)
	}
	ti.Begin, ti.End = offsets[0], offsets[1]
	return ti, nil
}

// ints reads a JSON array of integers, at most maxRank long.
func (p parser) ints(dec *json.Decoder, name, what string) ([]int64, error) {
	if err := p.expectDelim(dec, '[', name, what); err != nil {
		return nil, err
	}
	var out []int64
	for dec.More() {
		if len(out) == maxRank {
			return nil, p.errorf(name, nil, "%s has more than %d values", what, maxRank)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, p.errorf(name, err, "reading %s", what)
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, p.errorf(name, nil, "%s holds %s, not an integer", what, tokString(tok))
		}
		v, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil {
			return nil, p.errorf(name, nil, "%s holds %s, not a 64-bit integer", what, tokString(num))
		}
		out = append(out, v)
	}
	return out, p.expectDelim(dec, ']', name, what)
}

func (p parser) key(dec *json.Decoder, tensor string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", p.errorf(tensor, err, "invalid header JSON")
	}
	key, ok := tok.(string)
	if !ok { // encoding/json only yields strings in key position; kept for safety
		return "", p.errorf(tensor, nil, "invalid header JSON: key %s is not a string", tokString(tok))
	}
	return key, nil
}

func (p parser) expectDelim(dec *json.Decoder, want json.Delim, tensor, what string) error {
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return p.errorf(tensor, err, "invalid header JSON in %s", what)
	}
	if tok != want {
		return p.errorf(tensor, nil, "%s: got %s, want %q", what, tokString(tok), string(want))
	}
	return nil
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
	sorted := slices.Clone(infos)
	slices.SortFunc(sorted, func(a, b TensorInfo) int {
		if c := cmp.Compare(a.Begin, b.Begin); c != 0 {
			return c
		}
		return cmp.Compare(a.End, b.End)
	})
	var pos int64
	prev := ""
	for _, ti := range sorted {
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

// tokString renders a JSON token for an error message. Numbers and strings
// in a hostile header can be megabytes long, so only their start is shown.
func tokString(tok any) string {
	switch t := tok.(type) {
	case string:
		return "string " + quoteName(t)
	case json.Number:
		if len(t) > maxNameInErr {
			return string(t[:maxNameInErr]) + "..."
		}
		return string(t)
	case json.Delim:
		return strconv.Quote(string(t))
	case nil:
		return "null"
	}
	return fmt.Sprint(tok)
}
