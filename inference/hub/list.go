package hub

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/inloop/inloop/internal/capped"
)

// treeEntry is one element of GET /api/models/{repo}/tree/{revision}.
type treeEntry struct {
	Type string `json:"type"` // "file" or "directory"
	Path string `json:"path"`
	Size int64  `json:"size"`
	OID  string `json:"oid"` // git blob id
	LFS  *struct {
		OID  string `json:"oid"` // sha256 of the content
		Size int64  `json:"size"`
	} `json:"lfs"`
}

const maxFileSize = int64(1) << 44 // 16 TiB: anything larger is a corrupt listing

// list fetches the repository's file tree, following the hub's pagination,
// and returns the allowed files sorted by path (small configs first is not
// needed; a stable order is).
func (p *puller) list(ctx context.Context) ([]File, error) {
	next := fmt.Sprintf("%s/api/models/%s/tree/%s?recursive=1", p.endpoint, p.repo, url.PathEscape(p.revision))
	var files []File
	seen := map[string]bool{}
	entries := 0
	for page := 0; next != ""; page++ {
		if page >= maxListingPages {
			return nil, fmt.Errorf("hub: %s: file list longer than %d pages", p.repo, maxListingPages)
		}
		batch, link, err := p.listPage(ctx, next)
		if err != nil {
			return nil, err
		}
		if next, err = p.nextPage(link); err != nil {
			return nil, err
		}
		for _, e := range batch {
			if entries++; entries > maxFiles {
				return nil, fmt.Errorf("hub: %s: more than %d files listed", p.repo, maxFiles)
			}
			if e.Type != "file" {
				continue
			}
			if err := checkPath(e.Path); err != nil {
				return nil, err
			}
			if seen[e.Path] {
				return nil, fmt.Errorf("hub: %s: %q listed twice", p.repo, e.Path)
			}
			seen[e.Path] = true
			if !allowed(p.allow, e.Path) {
				continue
			}
			f, err := fileOf(e)
			if err != nil {
				return nil, fmt.Errorf("hub: %s: %w", p.repo, err)
			}
			files = append(files, f)
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

func (p *puller) listPage(ctx context.Context, u string) ([]treeEntry, string, error) {
	req, err := p.newRequest(ctx, u)
	if err != nil {
		return nil, "", fmt.Errorf("hub: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("hub: %s: file list: %w", p.repo, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", p.httpError(resp, "")
	}
	body, err := capped.ReadAll(resp.Body, maxListingBytes, "file list")
	if errors.Is(err, capped.ErrTooLarge) {
		return nil, "", fmt.Errorf("hub: %s: %w", p.repo, err)
	}
	if err != nil {
		return nil, "", fmt.Errorf("hub: %s: file list: %w", p.repo, err)
	}
	var entries []treeEntry
	if err := json.Unmarshal(body, &entries); err != nil {
		return nil, "", fmt.Errorf("hub: %s: file list: %w", p.repo, err)
	}
	return entries, resp.Header.Get("Link"), nil
}

var linkNext = regexp.MustCompile(`<([^>]*)>\s*;\s*rel="?next"?`)

// nextPage reads the next page's URL from a Link header; it must stay on the
// hub's own host.
func (p *puller) nextPage(link string) (string, error) {
	m := linkNext.FindStringSubmatch(link)
	if m == nil {
		return "", nil
	}
	base, _ := url.Parse(p.endpoint)
	u, err := base.Parse(m[1])
	if err != nil || u.Scheme != base.Scheme || u.Host != base.Host {
		return "", fmt.Errorf("hub: %s: file list points to another server: %q", p.repo, m[1])
	}
	return u.String(), nil
}

func fileOf(e treeEntry) (File, error) {
	f := File{Path: e.Path, Size: e.Size}
	if e.LFS != nil {
		f.Size = e.LFS.Size
		if !isHex(e.LFS.OID, 64) {
			return File{}, fmt.Errorf("%q: sha256 %q is not 64 hex digits", e.Path, e.LFS.OID)
		}
		f.SHA256 = strings.ToLower(e.LFS.OID)
	} else if e.OID != "" {
		if !isHex(e.OID, 40) {
			return File{}, fmt.Errorf("%q: blob id %q is not 40 hex digits", e.Path, e.OID)
		}
		f.BlobID = strings.ToLower(e.OID)
	}
	if f.Size < 0 || f.Size > maxFileSize {
		return File{}, fmt.Errorf("%q: size %d", e.Path, f.Size)
	}
	return f, nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
