package jinja

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Inloop: the operations on values that can cost more than their inputs —
// printing a list, comparing two lists, concatenating, replacing — charged to
// a budget (nil charges nothing) and bounded in depth (always), so that a
// DAG of lists that prints as 2**40 items, or a list that holds itself, ends
// the render instead of the process.

// printer writes a value's Python repr (Value.String), charging b for every
// node and byte. With max > 0 it stops after about max bytes (for error
// messages) instead of charging.
type printer struct {
	b   *Budget
	sb  strings.Builder
	max int
}

func (p *printer) write(s string) {
	if p.max > 0 {
		if room := p.max - p.sb.Len(); room < len(s) {
			if room > 0 {
				p.sb.WriteString(s[:room])
			}
			return
		}
	} else {
		p.b.Grow(p.sb.Len(), len(s))
	}
	p.sb.WriteString(s)
}

func (p *printer) full() bool { return p.max > 0 && p.sb.Len() >= p.max }

func (p *printer) value(v Value, depth int) {
	nested(depth)
	p.b.step()
	if p.full() {
		return
	}
	switch v.kind {
	case KindUndefined:
		p.write("Undefined")
	case KindNone:
		p.write("None")
	case KindBool:
		if v.v.(bool) {
			p.write("True")
		} else {
			p.write("False")
		}
	case KindInt:
		p.write(strconv.FormatInt(v.v.(int64), 10))
	case KindFloat:
		p.write(fmt.Sprintf("%g", v.v.(float64)))
	case KindString:
		p.write("'")
		p.write(v.v.(string))
		p.write("'")
	case KindList:
		p.write("[")
		for i, item := range v.v.(*List).Items {
			if i > 0 {
				p.write(", ")
			}
			p.value(item, depth+1)
			if p.full() {
				return
			}
		}
		p.write("]")
	case KindDict:
		d := v.v.(*Dict)
		p.write("{")
		for i, key := range d.Keys {
			if i > 0 {
				p.write(", ")
			}
			p.write("'")
			p.write(key)
			p.write("': ")
			p.value(d.Data[key], depth+1)
			if p.full() {
				return
			}
		}
		p.write("}")
	case KindCallable:
		p.write("<callable " + v.v.(Callable).Name + ">")
	default:
		p.write("Undefined")
	}
}

// repr is v.String() charged to b.
func repr(b *Budget, v Value) string {
	p := printer{b: b}
	p.value(v, 0)
	return p.sb.String()
}

// shortRepr is the start of v's repr, for an error message.
func shortRepr(v Value) string {
	const max = 200
	p := printer{max: max + 1}
	p.value(v, 0)
	s := p.sb.String()
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

// equalValues is Value.Equals charged to b, one step per node compared.
func equalValues(b *Budget, v, other Value, depth int) bool {
	nested(depth)
	b.step()
	if v.kind != other.kind {
		return false
	}
	switch v.kind {
	case KindUndefined, KindNone:
		return true
	case KindBool:
		return v.v.(bool) == other.v.(bool)
	case KindInt:
		return v.v.(int64) == other.v.(int64)
	case KindFloat:
		return v.v.(float64) == other.v.(float64)
	case KindString:
		b.scan(len(v.v.(string)))
		return v.v.(string) == other.v.(string)
	case KindList:
		x, y := v.v.(*List), other.v.(*List)
		if x.Len() != y.Len() {
			return false
		}
		for i := range x.Items {
			if !equalValues(b, x.Items[i], y.Items[i], depth+1) {
				return false
			}
		}
		return true
	case KindDict:
		x, y := v.v.(*Dict), other.v.(*Dict)
		if x.Len() != y.Len() {
			return false
		}
		for _, key := range x.Keys {
			yv, ok := y.Get(key)
			if !ok || !equalValues(b, x.Data[key], yv, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// concatStrings joins two strings, sized before it is built.
func concatStrings(b *Budget, x, y string) Value {
	b.str(int64(len(x)) + int64(len(y)))
	return NewString(x + y)
}

// replacedLen is the length of strings.Replace(s, old, new, count), found
// before the replacement is built.
func replacedLen(b *Budget, s, old, new string, count int) int64 {
	b.scan(len(s))
	n := int64(strings.Count(s, old))
	if count >= 0 && int64(count) < n {
		n = int64(count)
	}
	return int64(len(s)) - n*int64(len(old)) + satMul(n, int64(len(new)))
}

// compareValuesB is compareValues with the scan of string operands charged.
func compareValuesB(b *Budget, x, y Value) int {
	if x.IsString() {
		b.scan(len(x.AsString()))
	}
	if y.IsString() {
		b.scan(len(y.AsString()))
	}
	return compareValues(x, y)
}
