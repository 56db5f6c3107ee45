// Package hub downloads a model folder from the Hugging Face Hub, or from any
// server that speaks its HTTP API (a mirror, HF_ENDPOINT). It is the one part
// of Inloop that uses the network, and only when the user asks for a
// download: Pull lists the repository's files, fetches those worth having,
// resumes partial files, verifies sizes and hashes, and never writes outside
// the destination folder.
package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"
	"time"
)

// Version is reported in the User-Agent header ("inloop/<version>"); the app
// sets it from its build.
var Version = "dev"

// DefaultEndpoint is the Hugging Face Hub.
const DefaultEndpoint = "https://huggingface.co"

// DefaultAllow are the files a model folder needs: configs and tokenizers,
// weights, templates and vocabularies.
var DefaultAllow = []string{"*.json", "*.safetensors", "tokenizer.model", "*.jinja", "*.txt"}

// PullOptions say what to download and where.
type PullOptions struct {
	// Endpoint is the hub's base URL; empty means $HF_ENDPOINT, or else
	// DefaultEndpoint.
	Endpoint string
	// Repo is "org/name".
	Repo string
	// Revision is a branch, tag or commit; empty means "main".
	Revision string
	// Dir is the destination folder, created if missing.
	Dir string
	// Token, if set, is sent as a bearer token (for gated or private models).
	Token string
	// Progress, if set, is called as each file advances, with the bytes of
	// that file present so far and its size.
	Progress func(file string, done, total int64)
	// Allow are glob patterns (path.Match) of the files to fetch. A pattern
	// without a slash matches the base name in any folder; one with a slash
	// matches the whole path. Empty means DefaultAllow.
	Allow []string
	// Client makes the requests; nil means a client suited to large files.
	Client *http.Client
}

// File is one file of a repository, as the hub lists it.
type File struct {
	Path   string // slash-separated, relative to the repository root
	Size   int64
	SHA256 string // hex; set for files stored with Git LFS
	BlobID string // hex git blob id (SHA-1); set for other files
}

var (
	// ErrGated means the hub refused access: the model is gated or private
	// and needs a token (with access granted).
	ErrGated = errors.New("gated or private: set a token")
	// ErrNotFound means the repository, revision or file does not exist.
	ErrNotFound = errors.New("no such model or file")
	// ErrChecksum means a downloaded file did not match its size or hash.
	ErrChecksum = errors.New("download does not match the hub's checksum")
	// ErrUnsafePath means the listing named a file outside the destination.
	ErrUnsafePath = errors.New("unsafe file name")
	// ErrBadRepo means Repo is not of the form org/name.
	ErrBadRepo = errors.New("repository must be org/name")
)

// HTTPError is a request the hub answered with an error status.
type HTTPError struct {
	Repo   string
	File   string // empty for the file listing
	Status int
	Code   string // the hub's X-Error-Code, if any
}

func (e *HTTPError) Error() string {
	what := e.File
	if what == "" {
		what = "file list"
	}
	reason := http.StatusText(e.Status)
	if err := e.Unwrap(); err != nil {
		reason = err.Error()
	}
	return fmt.Sprintf("hub: %s: %s: HTTP %d: %s", e.Repo, what, e.Status, reason)
}

// Unwrap classifies the error as ErrGated or ErrNotFound where it is one.
func (e *HTTPError) Unwrap() error {
	switch e.Code {
	case "RepoNotFound", "RepositoryNotFound", "RevisionNotFound", "EntryNotFound":
		return ErrNotFound
	case "GatedRepo":
		return ErrGated
	}
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return ErrGated
	case http.StatusNotFound:
		return ErrNotFound
	}
	return nil
}

var (
	repoPart     = regexp.MustCompile(`^[A-Za-z0-9._-]{1,96}$`)
	revisionText = regexp.MustCompile(`^[A-Za-z0-9._/-]{1,256}$`)
)

// ValidateRepo checks that repo is "org/name" in the hub's alphabet.
func ValidateRepo(repo string) error {
	org, name, ok := strings.Cut(repo, "/")
	if !ok || !repoPart.MatchString(org) || !repoPart.MatchString(name) || strings.Contains(repo, "..") ||
		org == "." || name == "." {
		return fmt.Errorf("hub: %q: %w", repo, ErrBadRepo)
	}
	return nil
}

func validateRevision(rev string) error {
	if !revisionText.MatchString(rev) || strings.Contains(rev, "..") || strings.HasPrefix(rev, "/") || strings.HasSuffix(rev, "/") {
		return fmt.Errorf("hub: revision %q is not a branch, tag or commit name", rev)
	}
	return nil
}

// endpointURL resolves and checks the hub's base URL.
func endpointURL(s string) (string, error) {
	if s == "" {
		s = os.Getenv("HF_ENDPOINT")
	}
	if s == "" {
		s = DefaultEndpoint
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("hub: endpoint %q is not an http(s) URL", s)
	}
	return strings.TrimRight(s, "/"), nil
}

// checkPath refuses a listed file name that could land outside the
// destination or that no file system should see.
func checkPath(p string) error {
	bad := len(p) == 0 || len(p) > 1024 || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\\x00") ||
		path.Clean(p) != p || (len(p) >= 2 && p[1] == ':')
	for _, seg := range strings.Split(p, "/") {
		bad = bad || seg == "" || seg == "." || seg == ".."
	}
	for _, r := range p {
		bad = bad || r < 0x20 || r == 0x7f
	}
	if bad {
		return fmt.Errorf("hub: %q: %w", p, ErrUnsafePath)
	}
	return nil
}

// allowed reports whether p matches one of the patterns.
func allowed(patterns []string, p string) bool {
	for _, pat := range patterns {
		target := path.Base(p)
		if strings.Contains(pat, "/") {
			target = p
		}
		if ok, _ := path.Match(pat, target); ok {
			return true
		}
	}
	return false
}

// Tunables, overridden by the tests.
var (
	maxRedirects    = 5
	maxListingBytes = int64(16 << 20)
	maxListingPages = 100
	maxFiles        = 100_000
	maxAttempts     = 4
	retryDelay      = time.Second
	stallTimeout    = 60 * time.Second
)

// newClient returns an HTTP client for multi-gigabyte downloads: no overall
// timeout (a stalled body is caught by the stall watchdog), a few redirects
// (the hub sends file downloads to a CDN), never from https down to http.
func newClient(base *http.Client) *http.Client {
	c := &http.Client{}
	if base != nil {
		*c = *base
	} else {
		c.Transport = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   30 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		}
	}
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		switch {
		case len(via) > maxRedirects:
			return fmt.Errorf("%w: more than %d", errRedirect, maxRedirects)
		case req.URL.Scheme != "http" && req.URL.Scheme != "https":
			return fmt.Errorf("%w: to a %s URL", errRedirect, req.URL.Scheme)
		case via[0].URL.Scheme == "https" && req.URL.Scheme != "https":
			return fmt.Errorf("%w: from https to http", errRedirect)
		}
		return nil
	}
	return c
}

var errRedirect = errors.New("redirect refused")

// puller holds one Pull's settings.
type puller struct {
	endpoint string
	repo     string
	revision string
	token    string
	allow    []string
	client   *http.Client
	progress func(file string, done, total int64)
}

func newPuller(opts PullOptions) (*puller, error) {
	if err := ValidateRepo(opts.Repo); err != nil {
		return nil, err
	}
	rev := opts.Revision
	if rev == "" {
		rev = "main"
	}
	if err := validateRevision(rev); err != nil {
		return nil, err
	}
	ep, err := endpointURL(opts.Endpoint)
	if err != nil {
		return nil, err
	}
	allow := opts.Allow
	if len(allow) == 0 {
		allow = DefaultAllow
	}
	for _, pat := range allow {
		if _, err := path.Match(pat, ""); err != nil {
			return nil, fmt.Errorf("hub: allow pattern %q: %w", pat, err)
		}
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string, int64, int64) {}
	}
	return &puller{endpoint: ep, repo: opts.Repo, revision: rev, token: opts.Token, allow: allow,
		client: newClient(opts.Client), progress: progress}, nil
}

func (p *puller) newRequest(ctx context.Context, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "inloop/"+Version)
	if p.token != "" {
		// net/http drops this header when a redirect leaves the hub's domain.
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	return req, nil
}

func (p *puller) httpError(resp *http.Response, file string) *HTTPError {
	return &HTTPError{Repo: p.repo, File: file, Status: resp.StatusCode, Code: resp.Header.Get("X-Error-Code")}
}

// List returns the files of the repository that Pull would fetch.
func List(ctx context.Context, opts PullOptions) ([]File, error) {
	p, err := newPuller(opts)
	if err != nil {
		return nil, err
	}
	return p.list(ctx)
}

// Pull downloads the repository's allowed files into opts.Dir, one after
// another. A file already present with the right size and hash is kept; a
// partial one (name.part) is resumed. If ctx is cancelled, partial files are
// left for the next Pull to resume.
func Pull(ctx context.Context, opts PullOptions) error {
	p, err := newPuller(opts)
	if err != nil {
		return err
	}
	if opts.Dir == "" {
		return errors.New("hub: no destination folder")
	}
	files, err := p.list(ctx)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	// Every file operation goes through root, which refuses names and
	// symbolic links that lead outside Dir.
	root, err := os.OpenRoot(opts.Dir)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer root.Close()
	for _, f := range files {
		if err := p.fetch(ctx, root, f); err != nil {
			return err
		}
	}
	return nil
}
