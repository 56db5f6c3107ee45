package hub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	retryDelay = time.Millisecond
	os.Exit(m.Run())
}

// fakeHub mimics the Hugging Face Hub's file listing and resolve endpoints
// for one repository, with switches for the failures Pull must survive.
type fakeHub struct {
	t    *testing.T
	repo string
	srv  *httptest.Server

	mu    sync.Mutex
	files map[string][]byte // path -> content
	lfs   map[string]bool   // stored with LFS: listed with a sha256
	extra []treeEntry       // listed as is (hostile names, wrong hashes)

	// Failure switches.
	listStatus   int               // answer the listing with this status
	fileStatus   map[string]int    // answer resolve for a path with this status
	errorCode    string            // X-Error-Code sent with statuses
	dropAfter    map[string]int    // first request for path: drop the connection after n bytes
	stallAfter   map[string]int    // first request for path: send n bytes, then wait for the client to go
	ignoreRange  bool              // answer Range requests with the whole file (200)
	redirectTo   string            // resolve answers 302 to redirectTo + /cdn/path
	redirectLoop bool              // resolve answers 302 to itself
	fail5xx      map[string]int    // answer resolve with 503 this many times first
	wrongSHA     map[string]bool   // list a wrong sha256 for path
	nextPage     string            // Link header on the listing
	oversize     map[string]string // serve this content instead of the listed one

	// What the server saw.
	ranges     []string       // Range header of each file request ("" when none)
	resolves   map[string]int // resolve requests per file
	userAgents []string
	auths      []string
}

func newFakeHub(t *testing.T, files map[string]string, lfs ...string) *fakeHub {
	h := &fakeHub{t: t, repo: "acme/tiny-model", files: map[string][]byte{}, lfs: map[string]bool{},
		fileStatus: map[string]int{}, dropAfter: map[string]int{}, stallAfter: map[string]int{},
		fail5xx: map[string]int{}, wrongSHA: map[string]bool{}, resolves: map[string]int{}, oversize: map[string]string{}}
	for p, c := range files {
		h.files[p] = []byte(c)
	}
	for _, p := range lfs {
		h.lfs[p] = true
	}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *fakeHub) opts(dir string) PullOptions {
	return PullOptions{Endpoint: h.srv.URL, Repo: h.repo, Dir: dir}
}

func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func blobID(b []byte) string {
	s := sha1.New()
	fmt.Fprintf(s, "blob %d\x00", len(b))
	s.Write(b)
	return hex.EncodeToString(s.Sum(nil))
}

func (h *fakeHub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.userAgents = append(h.userAgents, r.Header.Get("User-Agent"))
	h.auths = append(h.auths, r.Header.Get("Authorization"))
	h.mu.Unlock()

	treePrefix := "/api/models/" + h.repo + "/tree/"
	resolvePrefix := "/" + h.repo + "/resolve/"
	switch {
	case strings.HasPrefix(r.URL.Path, treePrefix):
		if r.URL.Query().Get("recursive") != "1" {
			h.t.Errorf("listing without recursive=1: %s", r.URL)
		}
		h.serveTree(w, r)
	case strings.HasPrefix(r.URL.Path, resolvePrefix):
		rest := strings.TrimPrefix(r.URL.Path, resolvePrefix)
		_, file, _ := strings.Cut(rest, "/")
		h.serveFile(w, r, file, true)
	case strings.HasPrefix(r.URL.Path, "/cdn/"):
		h.serveFile(w, r, strings.TrimPrefix(r.URL.Path, "/cdn/"), false)
	default:
		http.NotFound(w, r)
	}
}

func (h *fakeHub) serveTree(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.listStatus != 0 {
		w.Header().Set("X-Error-Code", h.errorCode)
		http.Error(w, "nope", h.listStatus)
		return
	}
	entries := []treeEntry{{Type: "directory", Path: "original"}}
	for p, c := range h.files {
		e := treeEntry{Type: "file", Path: p, Size: int64(len(c)), OID: blobID(c)}
		if h.lfs[p] {
			sum := sha256Hex(c)
			if h.wrongSHA[p] {
				sum = strings.Repeat("0", 64)
			}
			e.OID = strings.Repeat("ab", 20) // the pointer's blob id, not the content's
			e.LFS = &struct {
				OID  string `json:"oid"`
				Size int64  `json:"size"`
			}{sum, int64(len(c))}
		}
		entries = append(entries, e)
	}
	entries = append(entries, h.extra...)
	if h.nextPage != "" {
		w.Header().Set("Link", h.nextPage)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(entries)
}

func (h *fakeHub) serveFile(w http.ResponseWriter, r *http.Request, file string, hub bool) {
	h.mu.Lock()
	if hub {
		h.resolves[file]++
	}
	h.ranges = append(h.ranges, r.Header.Get("Range"))
	content, ok := h.files[file]
	if o, ok := h.oversize[file]; ok {
		content = []byte(o)
	}
	status := h.fileStatus[file]
	redirect := hub && h.redirectTo != ""
	loop := hub && h.redirectLoop
	fail := hub && h.fail5xx[file] > 0
	if fail {
		h.fail5xx[file]--
	}
	drop, dropping := h.dropAfter[file]
	delete(h.dropAfter, file)
	stall, stalling := h.stallAfter[file]
	delete(h.stallAfter, file)
	ignoreRange := h.ignoreRange
	h.mu.Unlock()

	switch {
	case status != 0:
		w.Header().Set("X-Error-Code", h.errorCode)
		http.Error(w, "nope", status)
		return
	case fail:
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	case !ok:
		http.NotFound(w, r)
		return
	case loop:
		http.Redirect(w, r, r.URL.String(), http.StatusFound)
		return
	case redirect:
		http.Redirect(w, r, h.redirectTo+"/cdn/"+file, http.StatusFound)
		return
	}

	start := 0
	if rg := r.Header.Get("Range"); rg != "" && !ignoreRange {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
		if err != nil || n >= len(content) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(content)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start = n
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, len(content)-1, len(content)))
	}
	body := content[start:]
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if start > 0 {
		w.WriteHeader(http.StatusPartialContent)
	}
	switch {
	case dropping:
		w.Write(body[:drop])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection dies mid-file
	case stalling:
		w.Write(body[:stall])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	w.Write(body)
}
