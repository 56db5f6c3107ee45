package extract

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// zipFile is a zip container (DOCX, PPTX, ODT, EPUB) opened under the file's
// limits: at most MaxEntries entries, and at most MaxUnzipBytes inflated over
// all the entries read. archive/zip refuses an entry that inflates past the
// size its header declares, so the declared sizes are checked first (a zip
// bomb is refused before anything is inflated) and the bytes actually
// inflated are counted as well.
type zipFile struct {
	ctx    context.Context
	files  map[string]*zip.File
	left   int64 // bytes that may still be inflated
	limit  int64
	byName []string
}

func (x *extractor) openZip(raw []byte) (*zipFile, error) {
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return nil, fmt.Errorf("damaged zip container: %w", err)
	}
	if len(zr.File) > x.lim.MaxEntries {
		return nil, fmt.Errorf("%w: %d zip entries, over the limit of %d", ErrTooLarge, len(zr.File), x.lim.MaxEntries)
	}
	z := &zipFile{ctx: x.ctx, files: map[string]*zip.File{}, left: x.lim.MaxUnzipBytes, limit: x.lim.MaxUnzipBytes}
	var declared uint64
	for _, f := range zr.File {
		declared += f.UncompressedSize64
		if declared > uint64(x.lim.MaxUnzipBytes) {
			return nil, z.bomb()
		}
		z.files[f.Name] = f
		z.byName = append(z.byName, f.Name)
	}
	return z, nil
}

func (z *zipFile) bomb() error {
	return fmt.Errorf("%w: its zip entries inflate to more than %d bytes", ErrTooLarge, z.limit)
}

// has reports whether the container holds name.
func (z *zipFile) has(name string) bool { return z.files[name] != nil }

// open streams one entry, counting what it inflates.
func (z *zipFile) open(name string) (io.ReadCloser, error) {
	f := z.files[name]
	if f == nil {
		return nil, fmt.Errorf("no %s in the container", name)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &countingReader{rc: rc, z: z}, nil
}

// read reads one entry whole.
func (z *zipFile) read(name string) ([]byte, error) {
	rc, err := z.open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// xml opens an entry as an XML token stream.
func (z *zipFile) xml(name string) (*xml.Decoder, io.Closer, error) {
	rc, err := z.open(name)
	if err != nil {
		return nil, nil, err
	}
	d := xml.NewDecoder(rc)
	d.Strict = false
	d.CharsetReader = charsetReader
	return d, rc, nil
}

type countingReader struct {
	rc io.ReadCloser
	z  *zipFile
}

func (r *countingReader) Read(p []byte) (int, error) {
	if err := r.z.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.rc.Read(p)
	r.z.left -= int64(n)
	if r.z.left < 0 {
		return n, r.z.bomb()
	}
	return n, err
}

func (r *countingReader) Close() error { return r.rc.Close() }

// resolve joins a relationship target to the folder of the part naming it
// ("word/" + "../media/x" and so on), as zip entry names.
func resolve(dir, target string) string {
	if strings.HasPrefix(target, "/") {
		return strings.TrimPrefix(target, "/")
	}
	parts := strings.Split(strings.TrimSuffix(dir, "/"), "/")
	if dir == "" {
		parts = nil
	}
	for _, p := range strings.Split(target, "/") {
		switch p {
		case "", ".":
		case "..":
			if len(parts) > 0 {
				parts = parts[:len(parts)-1]
			}
		default:
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "/")
}

// rel is one OPC relationship: a part the naming part points to.
type rel struct{ Type, Target string }

// relationships reads an OPC .rels part (relationship id -> part), targets
// resolved against dir, the naming part's folder. External links are left out.
func (z *zipFile) relationships(relsName, dir string) map[string]rel {
	out := map[string]rel{}
	d, c, err := z.xml(relsName)
	if err != nil {
		return out
	}
	defer c.Close()
	for {
		t, err := d.Token()
		if err != nil {
			return out
		}
		if se, ok := t.(xml.StartElement); ok && se.Name.Local == "Relationship" && attr(se, "TargetMode") != "External" {
			out[attr(se, "Id")] = rel{Type: attr(se, "Type"), Target: resolve(dir, attr(se, "Target"))}
		}
	}
}

// attr is an attribute's value by local name.
func attr(se xml.StartElement, local string) string {
	for _, a := range se.Attr {
		if a.Name.Local == local {
			return a.Value
		}
	}
	return ""
}
