package tokenizer

// StreamDecoder decodes tokens one at a time, as a model generates them, and
// hands out only text that is complete: a character whose UTF-8 bytes are split
// over several tokens (an emoji, a CJK character under byte fallback) comes out
// whole once its last byte arrives.
//
// It decodes a short window of recent tokens and returns what that adds to the
// text already returned. The window starts with one token already returned, so
// decoders that treat the first token specially (dropping the leading space of
// a Metaspace model) see the same context as a full Decode would.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	window      []int // tokens still needed as context or not fully returned
	emitted     int   // bytes of decodeRaw(window) already returned
}

// NewDecoder returns a StreamDecoder; skipSpecial leaves special tokens out.
func (t *Tokenizer) NewDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Add appends one token and returns the text it completes (often "", or more
// than the token's own text when it finishes a character).
func (d *StreamDecoder) Add(id int) string {
	if _, ok := d.t.Token(id); !ok || d.skipSpecial && d.t.IsSpecial(id) {
		return ""
	}
	d.window = append(d.window, id)
	raw := d.t.decodeRaw(d.window, false)
	if len(raw) < d.emitted {
		// The decoder chain rewrote text already returned; nothing sound can be
		// said about it now, so start over from this token.
		d.window = append(d.window[:0], id)
		d.emitted = 0
		raw = d.t.decodeRaw(d.window, false)
	}
	cut := len(raw) - incompleteTail(raw)
	if cut <= d.emitted {
		return ""
	}
	out := lossyUTF8(raw[d.emitted:cut])
	d.emitted = cut
	if cut == len(raw) && len(d.window) > 1 {
		// Everything is out: keep only the last token as context.
		last := d.window[len(d.window)-1]
		d.window = append(d.window[:0], last)
		d.emitted = len(d.t.decodeRaw(d.window, false))
	}
	return out
}

// Flush returns what is left (an unfinished character becomes U+FFFD) and
// resets the decoder.
func (d *StreamDecoder) Flush() string {
	raw := d.t.decodeRaw(d.window, false)
	out := ""
	if len(raw) > d.emitted {
		out = lossyUTF8(raw[d.emitted:])
	}
	d.window, d.emitted = d.window[:0], 0
	return out
}
