package data

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
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

// capReader fails with ErrTooLarge once more than max bytes have been read,
// so a file that grows while it is read cannot exceed its cap.
type capReader struct {
	r    io.Reader
	left int64
	max  int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, fmt.Errorf("%w: over %d bytes", ErrTooLarge, c.max)
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n, fmt.Errorf("%w: over %d bytes", ErrTooLarge, c.max)
	}
	return n, err
}
