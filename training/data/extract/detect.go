package extract

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/mail"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/encoding/charmap"
)

// sniffBytes is how much of a file is searched for NULs, as git does.
const sniffBytes = 8000

// plainExts are extensions read as text without looking for a format inside:
// a .txt that starts like a mail is still a note about a mail.
var plainExts = map[string]bool{
	".txt": true, ".text": true, ".md": true, ".markdown": true, ".rst": true, ".org": true, ".adoc": true,
	".tex": true, ".json": true, ".yaml": true, ".yml": true, ".toml": true, ".xml": true, ".log": true,
}

// detect names the format of a file, or gives the reason it is not read.
// The content decides first (magic numbers), then the extension, then a
// look at the text.
func detect(name string, raw []byte) (string, error) {
	head := raw[:min(len(raw), 1024)]
	e := ext(name)
	switch {
	case bytes.Contains(head, []byte("%PDF-")):
		return "pdf", nil
	case bytes.HasPrefix(raw, []byte("PK\x03\x04")) || bytes.HasPrefix(raw, []byte("PK\x05\x06")):
		return zipFormat(raw)
	case bytes.HasPrefix(raw, []byte{0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1}):
		// Compound files hold Office 97–2003 documents, Outlook .msg, and
		// password-protected Office 2007+ documents (an EncryptedPackage stream).
		if bytes.Contains(raw, utf16le("EncryptedPackage")) {
			return "", fmt.Errorf("%w: a password-protected Office document", ErrEncrypted)
		}
		return "", fmt.Errorf("%w: an Office 97–2003 or Outlook file (save it as .docx, .xlsx, .pptx or .eml)", ErrUnsupported)
	}
	if !looksLikeText(raw) {
		ct := http.DetectContentType(raw)
		if ct == "application/octet-stream" {
			return "", ErrBinary
		}
		return "", fmt.Errorf("%w (%s)", ErrBinary, strings.SplitN(ct, ";", 2)[0])
	}
	switch e {
	case ".html", ".htm", ".xhtml", ".shtml":
		return "html", nil
	case ".csv":
		return "csv", nil
	case ".tsv", ".tab":
		return "tsv", nil
	case ".eml", ".mht", ".mhtml":
		return "eml", nil
	case ".mbox", ".mbx":
		return "mbox", nil
	}
	if plainExts[e] {
		return "text", nil
	}
	// Anything else that reads as text: look for a page or a mail inside.
	start := strings.ToLower(string(bytes.TrimLeft(trimBOM(head), " \t\r\n")))
	switch {
	case strings.HasPrefix(start, "<!doctype html") || strings.HasPrefix(start, "<html"):
		return "html", nil
	case strings.HasPrefix(start, "from ") && looksLikeMail(raw[bytes.IndexByte(raw, '\n')+1:]):
		return "mbox", nil
	case looksLikeMail(raw):
		return "eml", nil
	}
	return "text", nil
}

// zipFormat tells the zip-based formats apart by the entries they must have.
func zipFormat(raw []byte) (string, error) {
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return "", fmt.Errorf("damaged zip container: %w", err)
	}
	has := map[string]*zip.File{}
	for _, f := range zr.File {
		has[f.Name] = f
	}
	switch {
	case has["word/document.xml"] != nil:
		return "docx", nil
	case has["xl/workbook.xml"] != nil:
		return "xlsx", nil
	case has["ppt/presentation.xml"] != nil:
		return "pptx", nil
	}
	if f := has["mimetype"]; f != nil && f.UncompressedSize64 < 256 {
		if rc, err := f.Open(); err == nil {
			b, _ := io.ReadAll(io.LimitReader(rc, 256))
			rc.Close()
			switch strings.TrimSpace(string(b)) {
			case "application/epub+zip":
				return "epub", nil
			case "application/vnd.oasis.opendocument.text":
				return "odt", nil
			case "application/vnd.oasis.opendocument.spreadsheet":
				return "ods", nil
			case "application/vnd.oasis.opendocument.presentation":
				return "odp", nil
			}
		}
	}
	return "", fmt.Errorf("%w: a zip archive", ErrUnsupported)
}

// looksLikeText: a UTF-16 byte-order mark, or no NUL in the first bytes and
// few control characters (form feeds, escapes and tabs are fine).
func looksLikeText(raw []byte) bool {
	if bytes.HasPrefix(raw, []byte{0xff, 0xfe}) || bytes.HasPrefix(raw, []byte{0xfe, 0xff}) {
		return true
	}
	head := raw[:min(len(raw), sniffBytes)]
	if bytes.IndexByte(head, 0) >= 0 {
		return false
	}
	ctl := 0
	for _, c := range head {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f' && c != '\v' && c != 0x1b {
			ctl++
		}
	}
	return ctl*20 <= len(head) // at most 5%
}

// looksLikeMail: a header block that parses and names a sender and a subject
// or date, as a saved message has.
func looksLikeMail(raw []byte) bool {
	m, err := mail.ReadMessage(bytes.NewReader(raw[:min(len(raw), 64<<10)]))
	if err != nil {
		return false
	}
	return m.Header.Get("From") != "" && (m.Header.Get("Subject") != "" || m.Header.Get("Date") != "" || m.Header.Get("Message-Id") != "")
}

var bom = []byte("\xef\xbb\xbf")

func trimBOM(b []byte) []byte { return bytes.TrimPrefix(b, bom) }

// decodeText turns a text file's bytes into a string: UTF-16 decoded by its
// byte-order mark, a UTF-8 BOM dropped, text that is not UTF-8 read as
// Windows-1252 (the usual source of such files), line endings made LF.
func decodeText(raw []byte) string {
	var text string
	switch {
	case bytes.HasPrefix(raw, []byte{0xff, 0xfe}):
		text = decodeUTF16(raw[2:], binary.LittleEndian)
	case bytes.HasPrefix(raw, []byte{0xfe, 0xff}):
		text = decodeUTF16(raw[2:], binary.BigEndian)
	case utf8.Valid(raw):
		text = string(trimBOM(raw))
	default:
		text = decodeLegacy(raw)
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	return strings.ReplaceAll(text, "\r", "\n")
}

// decodeLegacy reads bytes that are not valid UTF-8: mostly UTF-8 with a few
// bad bytes keeps its UTF-8 (bad bytes replaced); otherwise Windows-1252.
func decodeLegacy(raw []byte) string {
	bad, multi := 0, 0
	for b := raw; len(b) > 0; {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			bad++
		} else if n > 1 {
			multi++
		}
		b = b[n:]
	}
	if multi >= bad {
		return string(trimBOM(raw))
	}
	s, err := charmap.Windows1252.NewDecoder().Bytes(raw)
	if err != nil {
		return string(raw)
	}
	return string(s)
}

func decodeUTF16(b []byte, order binary.ByteOrder) string {
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = order.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u))
}

func utf16le(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	return b
}
