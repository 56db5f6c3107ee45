package extract

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"net/textproto"
	"strings"

	"golang.org/x/text/encoding/htmlindex"
)

// mailHeaders are the headers kept with a message's text: who wrote to whom,
// when, and about what. Routing headers are noise to a model.
var mailHeaders = []string{"From", "To", "Cc", "Date", "Subject"}

// mailState counts one message's MIME parts against the limit.
type mailState struct {
	parts int
	notes *[]string
}

// eml reads one saved message: the headers that matter, the text body (the
// plain part of a plain/HTML alternative), forwarded messages, and the
// attachments whose format is supported, each read like a file of its own.
func (x *extractor) eml(raw []byte, depth int) (Document, error) {
	var notes []string
	w := newWriter(x.out)
	if err := x.message(raw, w, &mailState{notes: &notes}, depth); err != nil {
		return Document{}, err
	}
	return Document{Sections: []string{w.String()}, Notes: notes}, nil
}

// mbox reads a mailbox: messages separated by "From " lines, each read as
// eml reads one.
func (x *extractor) mbox(r io.Reader, depth int) (Document, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return Document{}, err
	}
	var notes []string
	w := newWriter(x.out)
	var msg []byte
	n := 0
	flush := func() error {
		if len(bytes.TrimSpace(msg)) == 0 {
			return nil
		}
		n++
		if n > x.lim.MaxEntries {
			return fmt.Errorf("%w: more than %d messages", ErrTooLarge, x.lim.MaxEntries)
		}
		w.sep(sepPara)
		err := x.message(msg, w, &mailState{notes: &notes}, depth)
		msg = msg[:0]
		return err
	}
	prevBlank := true
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			i = len(raw) - 1
		}
		line := raw[:i+1]
		raw = raw[i+1:]
		switch {
		case prevBlank && bytes.HasPrefix(line, []byte("From ")):
			if err := flush(); err != nil {
				return Document{}, err
			}
			if err := x.ctx.Err(); err != nil {
				return Document{}, err
			}
		case bytes.HasPrefix(bytes.TrimLeft(line, ">"), []byte("From ")) && line[0] == '>':
			msg = append(msg, line[1:]...) // mboxrd: one level of quoting undone
		default:
			msg = append(msg, line...)
		}
		prevBlank = len(bytes.TrimSpace(line)) == 0
	}
	if err := flush(); err != nil {
		return Document{}, err
	}
	return Document{Sections: []string{w.String()}, Pages: n, Notes: notes}, nil
}

var wordDecoder = mime.WordDecoder{CharsetReader: charsetReader}

// message writes one message: its headers, then its body.
func (x *extractor) message(raw []byte, w *writer, st *mailState, depth int) error {
	m, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("mail headers: %w", err)
	}
	for _, k := range mailHeaders {
		if v := m.Header.Get(k); v != "" {
			if d, err := wordDecoder.DecodeHeader(v); err == nil {
				v = d
			}
			w.sep(sepLine)
			w.text(k + ": " + v)
		}
	}
	w.sep(sepPara)
	return x.mimePart(textproto.MIMEHeader(m.Header), m.Body, w, st, depth)
}

// mimePart writes one MIME part and, for a multipart, the parts inside it.
func (x *extractor) mimePart(h textproto.MIMEHeader, body io.Reader, w *writer, st *mailState, depth int) error {
	st.parts++
	if st.parts > x.lim.MaxEntries {
		return fmt.Errorf("%w: more than %d MIME parts", ErrTooLarge, x.lim.MaxEntries)
	}
	if depth > x.lim.MaxDepth {
		return fmt.Errorf("%w: MIME parts nested more than %d deep", ErrTooLarge, x.lim.MaxDepth)
	}
	if err := x.ctx.Err(); err != nil {
		return err
	}
	if w.err != nil {
		return w.err
	}
	ctype, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil || ctype == "" {
		ctype, params = "text/plain", map[string]string{}
	}
	body = transferDecoder(h.Get("Content-Transfer-Encoding"), body)
	disp, dparams, _ := mime.ParseMediaType(h.Get("Content-Disposition"))
	filename := dparams["filename"]
	if filename == "" {
		filename = params["name"]
	}
	if d, err := wordDecoder.DecodeHeader(filename); err == nil {
		filename = d
	}
	switch {
	case strings.HasPrefix(ctype, "multipart/") && params["boundary"] != "":
		return x.multipart(ctype, params["boundary"], body, w, st, depth)
	case ctype == "message/rfc822":
		raw, err := x.readPart(body)
		if err != nil {
			return err
		}
		w.sep(sepPara)
		w.put("Forwarded message:")
		w.sep(sepLine)
		return x.message(raw, w, st, depth+1)
	case disp == "attachment" || (filename != "" && !strings.HasPrefix(ctype, "text/")):
		return x.attachment(filename, ctype, body, w, st, depth)
	case ctype == "text/html":
		r, err := charsetReader(params["charset"], body)
		if err != nil {
			r = body
		}
		w.sep(sepPara)
		return x.htmlTo(w, r)
	case strings.HasPrefix(ctype, "text/"):
		raw, err := x.readPart(body)
		if err != nil {
			return err
		}
		w.sep(sepPara)
		w.pre(strings.TrimSpace(decodeCharset(raw, params["charset"])))
		return w.err
	}
	return nil // an inline image or the like: nothing to read
}

// multipart writes a multipart's parts; of alternatives, only the plain
// text (or else the HTML, or else the last) is written.
func (x *extractor) multipart(ctype, boundary string, body io.Reader, w *writer, st *mailState, depth int) error {
	mr := multipart.NewReader(body, boundary)
	type alt struct {
		h    textproto.MIMEHeader
		body []byte
	}
	var alts []alt
	for {
		p, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if len(alts) > 0 || st.parts > 1 {
				break // a truncated last part: keep what was read
			}
			return fmt.Errorf("MIME: %w", err)
		}
		if ctype == "multipart/alternative" {
			st.parts++
			if st.parts > x.lim.MaxEntries {
				return fmt.Errorf("%w: more than %d MIME parts", ErrTooLarge, x.lim.MaxEntries)
			}
			b, err := x.readPart(p)
			if err != nil {
				return err
			}
			alts = append(alts, alt{p.Header, b})
			continue
		}
		if err := x.mimePart(p.Header, p, w, st, depth+1); err != nil {
			return err
		}
	}
	if len(alts) == 0 {
		return nil
	}
	best := alts[len(alts)-1]
	for _, want := range []string{"text/html", "text/plain"} {
		for _, a := range alts {
			if t, _, _ := mime.ParseMediaType(a.h.Get("Content-Type")); t == want {
				best = a
			}
		}
	}
	st.parts--
	return x.mimePart(best.h, bytes.NewReader(best.body), w, st, depth+1)
}

// attachment reads an attached file as a document of its own when its format
// is supported; otherwise a note says it was left out, and why.
func (x *extractor) attachment(filename, ctype string, body io.Reader, w *writer, st *mailState, depth int) error {
	raw, err := x.readPart(body)
	if err != nil {
		return err
	}
	if filename == "" {
		filename = "attachment"
	}
	before := x.out.left
	doc, err := x.extract(filename, raw, depth+1)
	if err != nil {
		if x.out.left < 0 || x.ctx.Err() != nil {
			return err // the mail's own limits are spent
		}
		*st.notes = append(*st.notes, fmt.Sprintf("attachment %s left out: %v", filename, err))
		return nil
	}
	x.out.left = before // its text is counted once, as w writes it
	w.sep(sepPara)
	w.put("Attachment " + filename + ":")
	w.sep(sepPara)
	w.pre(doc.Text())
	*st.notes = append(*st.notes, doc.Notes...)
	return w.err
}

// readPart reads a part's body under the file size limit.
func (x *extractor) readPart(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, x.lim.MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("MIME: %w", err)
	}
	if int64(len(b)) > x.lim.MaxFileBytes {
		return nil, fmt.Errorf("%w: a MIME part of more than %d bytes", ErrTooLarge, x.lim.MaxFileBytes)
	}
	return b, nil
}

func transferDecoder(cte string, r io.Reader) io.Reader {
	switch strings.ToLower(strings.TrimSpace(cte)) {
	case "base64":
		return base64.NewDecoder(base64.StdEncoding, &base64Cleaner{r: r})
	case "quoted-printable":
		return quotedprintable.NewReader(r)
	}
	return r
}

// base64Cleaner drops what base64 bodies carry besides the alphabet (line
// breaks, spaces), which the standard decoder does not skip all of.
type base64Cleaner struct{ r io.Reader }

func (c *base64Cleaner) Read(p []byte) (int, error) {
	for {
		n, err := c.r.Read(p)
		j := 0
		for _, b := range p[:n] {
			if b == ' ' || b == '\t' || b == '\r' || b == '\n' {
				continue
			}
			p[j] = b
			j++
		}
		if j > 0 || err != nil {
			return j, err
		}
	}
}

// charsetReader decodes text in a named character set (WHATWG names and
// aliases) to UTF-8.
func charsetReader(label string, r io.Reader) (io.Reader, error) {
	label = strings.ToLower(strings.TrimSpace(label))
	if label == "" || label == "utf-8" || label == "us-ascii" || label == "utf8" {
		return r, nil
	}
	enc, err := htmlindex.Get(label)
	if err != nil {
		return nil, fmt.Errorf("unknown character set %q", label)
	}
	return enc.NewDecoder().Reader(r), nil
}

func decodeCharset(raw []byte, label string) string {
	if r, err := charsetReader(label, bytes.NewReader(raw)); err == nil && label != "" {
		if b, err := io.ReadAll(r); err == nil {
			raw = b
		}
	}
	return decodeText(raw)
}

func containsFold(b []byte, s string) bool {
	return bytes.Contains(bytes.ToLower(b), []byte(strings.ToLower(s)))
}
