package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/inloop/inloop/internal/atomicfile"
)

const partSuffix = ".part"

// retryableError is a transfer that failed in a way worth another attempt
// from where it stopped: a dropped connection, a stall, a 5xx.
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// fetch brings one file into root: kept if already complete, else
// downloaded (resuming name.part), verified, and renamed into place.
func (p *puller) fetch(ctx context.Context, root *os.Root, f File) error {
	if p.have(root, f) {
		p.progress(f.Path, f.Size, f.Size)
		return nil
	}
	if dir := path.Dir(f.Path); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("hub: %s: %w", f.Path, err)
		}
	}
	part := f.Path + partSuffix
	for attempt := 1; ; attempt++ {
		err := p.download(ctx, root, f, part)
		if err == nil {
			break
		}
		var retry *retryableError
		if !errors.As(err, &retry) || attempt >= maxAttempts || ctx.Err() != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("hub: %s: %w (the partial file is kept for resuming)", f.Path, ctx.Err())
			}
			return err
		}
		select {
		case <-time.After(retryDelay * time.Duration(attempt)):
		case <-ctx.Done():
			return fmt.Errorf("hub: %s: %w (the partial file is kept for resuming)", f.Path, ctx.Err())
		}
	}
	if err := verify(root, part, f); err != nil {
		_ = root.Remove(part)
		return err
	}
	if err := root.Rename(part, f.Path); err != nil {
		return fmt.Errorf("hub: %s: %w", f.Path, err)
	}
	_ = atomicfile.SyncDirIn(root, path.Dir(f.Path)) // best effort: the file is complete and verified
	return nil
}

// have reports whether f is already in place with the right size and hash.
func (p *puller) have(root *os.Root, f File) bool {
	fi, err := root.Lstat(f.Path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != f.Size {
		return false
	}
	return verify(root, f.Path, f) == nil
}

// download makes one attempt at fetching f into part, resuming from what
// part already holds.
func (p *puller) download(ctx context.Context, root *os.Root, f File, part string) error {
	out, err := root.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("hub: %s: %w", f.Path, err)
	}
	defer out.Close()
	fi, err := out.Stat()
	if err != nil {
		return fmt.Errorf("hub: %s: %w", f.Path, err)
	}
	have := fi.Size()
	if have > f.Size {
		if err := out.Truncate(0); err != nil {
			return fmt.Errorf("hub: %s: %w", f.Path, err)
		}
		have = 0
	}
	p.progress(f.Path, have, f.Size)
	if have == f.Size {
		return nil // complete; verify decides
	}

	// The watchdog cancels the request if no byte arrives for stallTimeout.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(stallTimeout, func() { cancel(errStalled) })
	defer stall.Stop()

	req, err := p.newRequest(ctx, p.resolveURL(f.Path))
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return p.transferError(ctx, f, err)
	}
	defer resp.Body.Close()

	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, ok := contentRangeStart(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			// Not the range we asked for: start over.
			if err := out.Truncate(0); err != nil {
				return fmt.Errorf("hub: %s: %w", f.Path, err)
			}
			return &retryableError{fmt.Errorf("hub: %s: server resumed at the wrong offset (%q)", f.Path, resp.Header.Get("Content-Range"))}
		}
	case http.StatusOK:
		// The server ignored Range (or there was none): the body is the
		// whole file.
		if have > 0 {
			if err := out.Truncate(0); err != nil {
				return fmt.Errorf("hub: %s: %w", f.Path, err)
			}
			have = 0
			p.progress(f.Path, 0, f.Size)
		}
	case http.StatusRequestedRangeNotSatisfiable:
		if err := out.Truncate(0); err != nil {
			return fmt.Errorf("hub: %s: %w", f.Path, err)
		}
		return &retryableError{fmt.Errorf("hub: %s: server refused to resume", f.Path)}
	default:
		herr := p.httpError(resp, f.Path)
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout {
			return &retryableError{herr}
		}
		return herr
	}
	if _, err := out.Seek(have, io.SeekStart); err != nil {
		return fmt.Errorf("hub: %s: %w", f.Path, err)
	}

	// Copy at most one byte more than expected, to notice an oversized body.
	body := io.LimitReader(resp.Body, f.Size-have+1)
	buf := make([]byte, 256<<10)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			stall.Reset(stallTimeout)
			if have+int64(n) > f.Size {
				_ = out.Truncate(0)
				return fmt.Errorf("hub: %s: the server sent more than the %d bytes listed: %w", f.Path, f.Size, ErrChecksum)
			}
			if _, err := out.Write(buf[:n]); err != nil {
				return fmt.Errorf("hub: %s: %w", f.Path, err)
			}
			have += int64(n)
			p.progress(f.Path, have, f.Size)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return p.transferError(ctx, f, rerr)
		}
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("hub: %s: %w", f.Path, err)
	}
	if have != f.Size {
		return &retryableError{fmt.Errorf("hub: %s: connection closed after %d of %d bytes", f.Path, have, f.Size)}
	}
	return nil
}

var errStalled = errors.New("no data received for too long")

// transferError classifies a failed request or read: the caller's own
// cancellation is final, anything else (a reset, a stall) may be retried.
func (p *puller) transferError(ctx context.Context, f File, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, errStalled) {
		return &retryableError{fmt.Errorf("hub: %s: %w", f.Path, cause)}
	}
	err = fmt.Errorf("hub: %s: %w", f.Path, err)
	if ctx.Err() != nil {
		return err
	}
	if errors.Is(err, errRedirect) {
		return err // a refused redirect will not change on retry
	}
	return &retryableError{err}
}

func (p *puller) resolveURL(file string) string {
	segs := strings.Split(file, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return fmt.Sprintf("%s/%s/resolve/%s/%s", p.endpoint, p.repo, url.PathEscape(p.revision), strings.Join(segs, "/"))
}

// contentRangeStart parses the first byte of "bytes START-END/TOTAL".
func contentRangeStart(h string) (int64, bool) {
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, false
	}
	start, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(start), 10, 64)
	return n, err == nil && n >= 0
}

// verify checks name's size and, when the hub gave one, its hash: sha256 for
// LFS files, the git blob id otherwise.
func verify(root *os.Root, name string, f File) error {
	in, err := root.Open(name)
	if err != nil {
		return fmt.Errorf("hub: %s: %w", f.Path, err)
	}
	defer in.Close()
	var h hash.Hash
	var want string
	switch {
	case f.SHA256 != "":
		h, want = sha256.New(), f.SHA256
	case f.BlobID != "":
		h, want = sha1.New(), f.BlobID
		fmt.Fprintf(h, "blob %d\x00", f.Size)
	default:
		h = sha256.New()
	}
	n, err := io.Copy(h, in)
	if err != nil {
		return fmt.Errorf("hub: %s: %w", f.Path, err)
	}
	if n != f.Size {
		return fmt.Errorf("hub: %s: %d bytes, want %d: %w", f.Path, n, f.Size, ErrChecksum)
	}
	if got := hex.EncodeToString(h.Sum(nil)); want != "" && got != want {
		return fmt.Errorf("hub: %s: hash %s, want %s: %w", f.Path, got, want, ErrChecksum)
	}
	return nil
}
