package extract

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// maxHTMLToken bounds one tag or text run, so a page that is one endless
// attribute cannot hold the file's whole size in a single token.
const maxHTMLToken = 4 << 20

// htmlDropped are elements whose content is not the page's text.
var htmlDropped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Head: true, atom.Noscript: true, atom.Template: true,
	atom.Svg: true, atom.Math: true, atom.Iframe: true, atom.Object: true, atom.Canvas: true,
	atom.Select: true, atom.Button: true, atom.Title: true,
}

// htmlBlocks end a paragraph; htmlLines end a line.
var (
	htmlBlocks = map[atom.Atom]bool{
		atom.P: true, atom.Div: true, atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true, atom.H5: true,
		atom.H6: true, atom.Ul: true, atom.Ol: true, atom.Dl: true, atom.Blockquote: true, atom.Pre: true,
		atom.Section: true, atom.Article: true, atom.Aside: true, atom.Header: true, atom.Footer: true,
		atom.Nav: true, atom.Main: true, atom.Figure: true, atom.Hr: true, atom.Address: true, atom.Details: true,
		atom.Fieldset: true, atom.Form: true, atom.Body: true,
	}
	htmlLines = map[atom.Atom]bool{
		atom.Br: true, atom.Li: true, atom.Dt: true, atom.Dd: true, atom.Figcaption: true, atom.Caption: true,
		atom.Summary: true, atom.Legend: true,
	}
)

// html reads a web page's text with golang.org/x/net/html's tokenizer, which
// handles what browsers handle (unclosed tags, entities, stray markup) while
// holding one token at a time: block elements become paragraphs, tables rows
// of cells, and scripts, styles and the head are left out.
func (x *extractor) html(page string) (string, error) {
	w := newWriter(x.out)
	if err := x.htmlTo(w, strings.NewReader(page)); err != nil {
		return "", err
	}
	return w.String(), w.err
}

func (x *extractor) htmlTo(w *writer, r io.Reader) error {
	z := html.NewTokenizer(r)
	z.SetMaxBuf(maxHTMLToken)
	dropped, pre := 0, 0 // depth inside dropped and preformatted elements
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := x.ctx.Err(); err != nil {
				return err
			}
		}
		if w.err != nil {
			return w.err
		}
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			if err := z.Err(); !errors.Is(err, io.EOF) {
				if errors.Is(err, html.ErrBufferExceeded) {
					return fmt.Errorf("%w: a tag or text run of more than %d bytes", ErrTooLarge, maxHTMLToken)
				}
				return err
			}
			return nil
		case html.TextToken:
			if dropped > 0 {
				continue
			}
			if pre > 0 {
				w.pre(string(z.Text()))
			} else {
				w.text(string(z.Text()))
			}
		case html.StartTagToken, html.EndTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			start, end := tt != html.EndTagToken, tt != html.StartTagToken
			if htmlDropped[a] {
				if tt == html.StartTagToken {
					dropped++
				} else if tt == html.EndTagToken && dropped > 0 {
					dropped--
				}
				continue
			}
			if dropped > 0 {
				continue
			}
			switch {
			case a == atom.Table:
				if start {
					w.startTable()
				}
				if end {
					w.endTable()
				}
			case a == atom.Tr:
				if start {
					w.startRow()
				}
				if end {
					w.endRow()
				}
			case a == atom.Td || a == atom.Th:
				if start {
					w.startCell()
				}
				if end {
					w.endCell()
				}
			case a == atom.Pre:
				w.sep(sepPara)
				if tt == html.StartTagToken {
					pre++
				} else if tt == html.EndTagToken && pre > 0 {
					pre--
				}
			case htmlBlocks[a]:
				w.sep(sepPara)
			case htmlLines[a]:
				w.sep(sepLine)
			}
		}
	}
}
