package data

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/inloop/inloop/internal/capped"
)

// lineReader yields a file's lines without their terminator (LF or CRLF) and
// without a leading UTF-8 byte-order mark, holding at most max bytes of a line:
// a longer line is skipped and reported, and reading goes on after it.
type lineReader struct {
	br  *bufio.Reader
	max int
	n   int // number of the line last returned, from 1
	buf []byte
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

var bom = []byte("\xef\xbb\xbf")

// next returns the next line; long reports that it was over the cap (and line
// is then empty). At the end it returns io.EOF.
func (l *lineReader) next() (line []byte, long bool, err error) {
	l.buf = l.buf[:0]
	read := 0
	for {
		chunk, err := l.br.ReadSlice('\n')
		read += len(chunk)
		if !long {
			if len(l.buf)+len(chunk) > l.max+len(bom)+2 { // room for a BOM and CRLF
				long, l.buf = true, l.buf[:0]
			} else {
				l.buf = append(l.buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF && read == 0 {
			return nil, false, io.EOF
		}
		if err != nil && err != io.EOF {
			return nil, false, err
		}
		break
	}
	l.n++
	line = bytes.TrimSuffix(l.buf, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if l.n == 1 {
		line = bytes.TrimPrefix(line, bom)
	}
	if len(line) > l.max {
		long, line = true, nil
	}
	return line, long, nil
}

// withTooLarge adds ErrTooLarge to an error from internal/capped that says a
// file is over its cap (that error names the file and the sizes); any other
// error is returned as it is.
func withTooLarge(err error) error {
	if errors.Is(err, capped.ErrTooLarge) {
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return err
}
