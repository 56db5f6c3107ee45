package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"html"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf16"
)

// documentExts are the plain-text formats read from a documents folder.
var documentExts = map[string]bool{
	".txt": true, ".text": true, ".md": true, ".markdown": true, ".rst": true, ".org": true, ".adoc": true,
	".tex": true, ".csv": true, ".tsv": true, ".json": true, ".yaml": true, ".yml": true, ".toml": true,
	".html": true, ".htm": true, ".xml": true,
	// source code
	".go": true, ".py": true, ".js": true, ".mjs": true, ".ts": true, ".tsx": true, ".jsx": true, ".java": true,
	".kt": true, ".scala": true, ".swift": true, ".m": true, ".c": true, ".h": true, ".cc": true, ".cpp": true,
	".hpp": true, ".cs": true, ".rs": true, ".rb": true, ".php": true, ".pl": true, ".lua": true, ".r": true,
	".jl": true, ".hs": true, ".ex": true, ".exs": true, ".erl": true, ".clj": true, ".sh": true, ".bash": true,
	".zsh": true, ".sql": true, ".css": true, ".scss": true, ".vue": true, ".svelte": true, ".dart": true,
	".zig": true, ".nim": true, ".ml": true, ".fs": true, ".proto": true, ".graphql": true,
}

// IsDocument reports whether a file name is one a documents folder reads:
// a known plain-text extension, and not hidden or an editor's backup or lock
// file.
func IsDocument(name string) bool {
	base := filepath.Base(name)
	if base == "" || base[0] == '.' || base[0] == '#' || strings.HasSuffix(base, "~") {
		return false
	}
	return documentExts[strings.ToLower(filepath.Ext(base))]
}

// sniffBytes is how much of a file is searched for NULs, as git does.
const sniffBytes = 8000

// documentText turns a file's bytes into training text: UTF-16 decoded, BOM
// dropped, line endings made LF, invalid UTF-8 replaced, HTML reduced to its
// text. A file with NULs in its first bytes is binary (ErrBinary).
func documentText(name string, raw []byte) (string, error) {
	var text string
	switch {
	case bytes.HasPrefix(raw, []byte{0xff, 0xfe}):
		text = decodeUTF16(raw[2:], binary.LittleEndian)
	case bytes.HasPrefix(raw, []byte{0xfe, 0xff}):
		text = decodeUTF16(raw[2:], binary.BigEndian)
	default:
		if bytes.IndexByte(raw[:min(len(raw), sniffBytes)], 0) >= 0 {
			return "", fmt.Errorf("%w: NUL bytes in %q", ErrBinary, name)
		}
		text = string(bytes.TrimPrefix(raw, bom))
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	text = strings.ReplaceAll(text, "\r", "\n")
	switch strings.ToLower(filepath.Ext(name)) {
	case ".html", ".htm":
		text = stripHTML(text)
	}
	return text, nil
}

func decodeUTF16(b []byte, order binary.ByteOrder) string {
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = order.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u))
}

var (
	htmlDropped  = regexp.MustCompile(`(?is)<(script|style|head|noscript|template|svg)\b.*?</(script|style|head|noscript|template|svg)\s*>|<!--.*?-->`)
	htmlBreaking = regexp.MustCompile(`(?i)</?(p|div|br|hr|h[1-6]|li|ul|ol|dl|dt|dd|tr|table|section|article|aside|header|footer|nav|main|blockquote|pre|figure|figcaption)\b[^>]*>`)
	htmlTag      = regexp.MustCompile(`(?s)<[^>]*>`)
	spaceRun     = regexp.MustCompile(`[ \t\f\v\x{00a0}]+`)
	blankLines   = regexp.MustCompile(`\n{3,}`)
)

// stripHTML keeps a page's text, crudely: no scripts, styles or head; block
// elements become line breaks (so paragraphs survive); entities are decoded.
func stripHTML(s string) string {
	s = htmlDropped.ReplaceAllString(s, "")
	s = htmlBreaking.ReplaceAllString(s, "\n")
	s = htmlTag.ReplaceAllString(s, "")
	s = html.UnescapeString(s)
	s = spaceRun.ReplaceAllString(s, " ")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	s = strings.Join(lines, "\n")
	s = blankLines.ReplaceAllString(s, "\n\n")
	return strings.TrimSpace(s)
}
