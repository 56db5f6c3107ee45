package extract

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"net/url"
	"path"
	"strings"
)

// epub reads an e-book: the chapters of its spine in reading order, each an
// XHTML page read like a web page. A book whose chapters are encrypted (DRM)
// is skipped; obfuscated fonts alone do not matter.
func (x *extractor) epub(raw []byte) (Document, error) {
	z, err := x.openZip(raw)
	if err != nil {
		return Document{}, err
	}
	opf, err := epubRootfile(z)
	if err != nil {
		return Document{}, err
	}
	spine, err := epubSpine(z, opf)
	if err != nil {
		return Document{}, err
	}
	if len(spine) > x.lim.MaxEntries {
		return Document{}, fmt.Errorf("%w: %d chapters, over the limit of %d", ErrTooLarge, len(spine), x.lim.MaxEntries)
	}
	encrypted := epubEncrypted(z)
	w := newWriter(x.out)
	for _, ch := range spine {
		if encrypted[ch] {
			return Document{}, fmt.Errorf("%w: the book's chapters are encrypted (DRM)", ErrEncrypted)
		}
		rc, err := z.open(ch)
		if err != nil {
			return Document{}, err
		}
		w.sep(sepPara)
		err = x.htmlTo(w, rc)
		rc.Close()
		if err != nil {
			return Document{}, fmt.Errorf("%s: %w", ch, err)
		}
	}
	return Document{Sections: []string{w.String()}, Pages: len(spine)}, w.err
}

// epubRootfile finds the package document (OPF) named by container.xml.
func epubRootfile(z *zipFile) (string, error) {
	b, err := z.read("META-INF/container.xml")
	if err != nil {
		return "", err
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = false
	for {
		t, err := d.Token()
		if err != nil {
			return "", fmt.Errorf("META-INF/container.xml names no package document")
		}
		if se, ok := t.(xml.StartElement); ok && se.Name.Local == "rootfile" && z.has(attr(se, "full-path")) {
			return attr(se, "full-path"), nil
		}
	}
}

// epubSpine lists the spine's chapters as zip entry names.
func epubSpine(z *zipFile, opf string) ([]string, error) {
	b, err := z.read(opf)
	if err != nil {
		return nil, err
	}
	dir := path.Dir(opf)
	if dir == "." {
		dir = ""
	}
	manifest := map[string]string{}
	var order []string
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = false
	d.CharsetReader = charsetReader
	for {
		t, err := d.Token()
		if err != nil {
			break
		}
		se, ok := t.(xml.StartElement)
		if !ok {
			continue
		}
		switch se.Name.Local {
		case "item":
			href, err := url.PathUnescape(attr(se, "href"))
			if err != nil {
				href = attr(se, "href")
			}
			manifest[attr(se, "id")] = resolve(dir, href)
		case "itemref":
			if attr(se, "linear") != "no" {
				order = append(order, attr(se, "idref"))
			}
		}
	}
	var out []string
	for _, id := range order {
		if p, ok := manifest[id]; ok && z.has(p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: the book's spine lists no chapter", opf)
	}
	return out, nil
}

// epubEncrypted lists the entries META-INF/encryption.xml says are
// encrypted with something other than font obfuscation.
func epubEncrypted(z *zipFile) map[string]bool {
	out := map[string]bool{}
	b, err := z.read("META-INF/encryption.xml")
	if err != nil {
		return out
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = false
	method := ""
	for {
		t, err := d.Token()
		if err != nil {
			return out
		}
		se, ok := t.(xml.StartElement)
		if !ok {
			continue
		}
		switch se.Name.Local {
		case "EncryptionMethod":
			method = attr(se, "Algorithm")
		case "CipherReference":
			if !strings.Contains(method, "embedding") && !strings.Contains(method, "obfuscation") {
				uri, _ := url.PathUnescape(attr(se, "URI"))
				out[resolve("", uri)] = true
			}
		}
	}
}
