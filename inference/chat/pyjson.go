package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/inloop/inloop/inference/chat/internal/jinja"
)

// pyTojson is transformers' tojson filter:
// json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys). Key order is the order the data came in, as in Python.
// Every byte it writes is charged to the render's budget first: the indent
// and the separators come from the template, and a list may hold itself.
func pyTojson(budget *jinja.Budget, args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: missing value")
	}
	e := pyEncoder{itemSep: ", ", keySep: ": ", budget: budget}
	if v, ok := kwargs["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		switch {
		case v.IsInt():
			n := max(0, v.AsInt())
			budget.Grow(0, int(min(n, math.MaxInt32)))
			e.indent, e.indented = strings.Repeat(" ", int(n)), true
		case v.IsString():
			e.indent, e.indented = v.AsString(), true
		default:
			return jinja.Undefined(), errors.New("tojson: indent must be an integer or a string")
		}
		e.itemSep = ","
	}
	if v, ok := kwargs["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return jinja.Undefined(), errors.New("tojson: separators must be two strings")
		}
		e.itemSep, e.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
	}
	if v, ok := kwargs["sort_keys"]; ok {
		e.sortKeys = v.IsTruthy()
	}
	if v, ok := kwargs["ensure_ascii"]; ok {
		e.ensureASCII = v.IsTruthy()
	}
	var b strings.Builder
	if err := e.encode(&b, args[0], 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
}

type pyEncoder struct {
	indent      string
	indented    bool
	itemSep     string
	keySep      string
	sortKeys    bool
	ensureASCII bool
	budget      *jinja.Budget
}

// put writes s after charging it to the budget.
func (e *pyEncoder) put(b *strings.Builder, s string) {
	e.budget.Grow(b.Len(), len(s))
	b.WriteString(s)
}

const maxJSONDepth = 512

func (e *pyEncoder) encode(b *strings.Builder, v jinja.Value, depth int) error {
	if depth > maxJSONDepth {
		// A list that holds itself gets here: the budget's kind of error.
		return &jinja.BudgetError{Limit: "nesting", Max: maxJSONDepth}
	}
	e.budget.Step()
	switch {
	case v.IsUndefined(), v.IsNone(), v.IsCallable():
		e.put(b, "null")
	case v.IsBool():
		e.put(b, strconv.FormatBool(v.AsBool()))
	case v.IsInt():
		e.put(b, strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		e.put(b, pyFloatRepr(v.AsFloat()))
	case v.IsString():
		e.writeString(b, v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			e.put(b, "[]")
			return nil
		}
		e.put(b, "[")
		for i, item := range items {
			if i > 0 {
				e.put(b, e.itemSep)
			}
			e.newline(b, depth+1)
			if err := e.encode(b, item, depth+1); err != nil {
				return err
			}
		}
		e.newline(b, depth)
		e.put(b, "]")
	case v.IsDict():
		d := v.AsDict()
		keys := d.OrderedKeys()
		if len(keys) == 0 {
			e.put(b, "{}")
			return nil
		}
		if e.sortKeys {
			sort.Strings(keys)
		}
		e.put(b, "{")
		for i, k := range keys {
			if i > 0 {
				e.put(b, e.itemSep)
			}
			e.newline(b, depth+1)
			e.writeString(b, k)
			e.put(b, e.keySep)
			val, _ := d.Get(k)
			if err := e.encode(b, val, depth+1); err != nil {
				return err
			}
		}
		e.newline(b, depth)
		e.put(b, "}")
	default:
		e.put(b, "null")
	}
	return nil
}

func (e *pyEncoder) newline(b *strings.Builder, depth int) {
	if !e.indented {
		return
	}
	e.budget.Grow(b.Len(), 1+depth*len(e.indent))
	b.WriteByte('\n')
	for range depth {
		b.WriteString(e.indent)
	}
}

// writeString escapes as Python's json module does: only quotes, backslashes
// and control characters (and, with ensure_ascii, everything past ASCII).
func (e *pyEncoder) writeString(b *strings.Builder, s string) {
	e.budget.Grow(b.Len(), 12*len(s)+2) // \uXXXX\uXXXX for a 4-byte rune at worst
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case e.ensureASCII && r > 0x7e:
				if r >= 0x10000 {
					hi, lo := utf16.EncodeRune(r)
					fmt.Fprintf(b, `\u%04x\u%04x`, hi, lo)
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// pyFloatRepr formats f as Python's repr(float) does: the shortest digits
// that round-trip, positional for exponents -4..15 (always with a decimal
// point), scientific with a two-digit exponent otherwise.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	sign := ""
	if sci[0] == '-' {
		sign, sci = "-", sci[1:]
	}
	mant, expStr, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	var s string
	switch point := exp + 1; {
	case point <= 0:
		s = "0." + strings.Repeat("0", -point) + digits
	case point >= len(digits):
		s = digits + strings.Repeat("0", point-len(digits)) + ".0"
	default:
		s = digits[:point] + "." + digits[point:]
	}
	return sign + s
}

// jsonValue decodes JSON text into a template value, keeping object keys in
// document order (as Python's json.loads does) and integers as integers.
func jsonValue(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSONValue(dec, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("json: trailing data after value")
	}
	return v, nil
}

func decodeJSONValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Undefined(), errors.New("json: nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			var items []jinja.Value
			for dec.More() {
				item, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, item)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), errors.New("json: object key is not a string")
				}
				val, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(key, val)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return d, nil
		}
		return jinja.Undefined(), fmt.Errorf("json: unexpected %v", t)
	case json.Number:
		return jinja.FromGoValue(t), nil
	default:
		return jinja.FromGoValue(t), nil
	}
}

// goValue converts data a caller hands to Render into a template value.
// json.RawMessage keeps its key order; Go maps have none, so their keys are
// sorted, which is the only deterministic choice.
func goValue(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case jinja.Value:
		return x, nil
	case json.RawMessage:
		return jsonValue(x)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			val, err := goValue(x[k])
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("%s: %w", k, err)
			}
			d.AsDict().Set(k, val)
		}
		return d, nil
	case []any:
		items := make([]jinja.Value, len(x))
		for i, item := range x {
			val, err := goValue(item)
			if err != nil {
				return jinja.Undefined(), err
			}
			items[i] = val
		}
		return jinja.NewList(items), nil
	case []map[string]any:
		items := make([]jinja.Value, len(x))
		for i, item := range x {
			val, err := goValue(item)
			if err != nil {
				return jinja.Undefined(), err
			}
			items[i] = val
		}
		return jinja.NewList(items), nil
	case []string:
		items := make([]jinja.Value, len(x))
		for i, s := range x {
			items[i] = jinja.NewString(s)
		}
		return jinja.NewList(items), nil
	case int32:
		return jinja.NewInt(int64(x)), nil
	case uint32:
		return jinja.NewInt(int64(x)), nil
	case float32:
		return jinja.NewFloat(float64(x)), nil
	case nil, bool, int, int64, float64, string, json.Number:
		return jinja.FromGoValue(x), nil
	}
	val := jinja.FromGoValue(v)
	if val.IsUndefined() {
		return val, fmt.Errorf("unsupported type %T", v)
	}
	return val, nil
}
