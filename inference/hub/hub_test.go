package hub

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var modelFiles = map[string]string{
	"config.json":                  `{"model_type": "llama"}`,
	"tokenizer.json":               `{"version": "1.0"}`,
	"model.safetensors":            strings.Repeat("weights!", 4096),
	"original/params.json":         `{"dim": 64}`,
	"README.md":                    "# not fetched",
	"original/consolidated.00.pth": "not fetched either",
}

// checkFolder asserts dir holds exactly the want files with their content.
func checkFolder(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, _ := os.ReadFile(p)
		got[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	for name, content := range want {
		if got[name] != content {
			t.Errorf("%s: got %d bytes, want %d", name, len(got[name]), len(content))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected file %s", name)
		}
	}
}

func wantedFiles() map[string]string {
	return map[string]string{
		"config.json":          modelFiles["config.json"],
		"tokenizer.json":       modelFiles["tokenizer.json"],
		"model.safetensors":    modelFiles["model.safetensors"],
		"original/params.json": modelFiles["original/params.json"],
	}
}

func TestPullDownloadsAllowedFiles(t *testing.T) {
	h := newFakeHub(t, modelFiles, "model.safetensors")
	dir := filepath.Join(t.TempDir(), "models", "tiny")
	opts := h.opts(dir)
	opts.Token = "secret"
	var mu sync.Mutex
	last := map[string][2]int64{}
	opts.Progress = func(file string, done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		if prev := last[file]; done < prev[0] && done != 0 {
			t.Errorf("%s: progress went back from %d to %d", file, prev[0], done)
		}
		last[file] = [2]int64{done, total}
	}
	if err := Pull(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	checkFolder(t, dir, wantedFiles())
	for name, content := range wantedFiles() {
		if p := last[name]; p[0] != int64(len(content)) || p[1] != int64(len(content)) {
			t.Errorf("%s: last progress %v, want done = total = %d", name, p, len(content))
		}
	}
	for i, ua := range h.userAgents {
		if ua != "inloop/"+Version || h.auths[i] != "Bearer secret" {
			t.Errorf("request %d: User-Agent %q, Authorization %q", i, ua, h.auths[i])
		}
	}

	// A second pull finds everything in place and downloads nothing.
	before := len(h.ranges)
	if err := Pull(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if len(h.ranges) != before {
		t.Errorf("second pull downloaded %d files again", len(h.ranges)-before)
	}
}

func TestListAppliesAllowPatterns(t *testing.T) {
	h := newFakeHub(t, modelFiles, "model.safetensors")
	opts := h.opts("")
	opts.Allow = []string{"original/*", "*.md"}
	files, err := List(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Path)
	}
	if want := []string{"README.md", "original/consolidated.00.pth", "original/params.json"}; !slices.Equal(names, want) {
		t.Errorf("got %q, want %q", names, want)
	}
	opts.Allow = []string{"[bad"}
	if _, err := List(context.Background(), opts); err == nil {
		t.Error("a malformed pattern was accepted")
	}
}

func TestPullFollowsRedirectToCDN(t *testing.T) {
	cdn := newFakeHub(t, modelFiles)
	h := newFakeHub(t, modelFiles, "model.safetensors")
	// Another host name for the same machine, as a CDN would be.
	h.redirectTo = strings.Replace(cdn.srv.URL, "127.0.0.1", "localhost", 1)
	cdn.dropAfter["model.safetensors"] = 5000
	dir := t.TempDir()
	opts := h.opts(dir)
	opts.Token = "secret"
	if err := Pull(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	checkFolder(t, dir, wantedFiles())
	if len(cdn.auths) == 0 {
		t.Fatal("the CDN saw no request")
	}
	for _, a := range cdn.auths {
		if a != "" {
			t.Errorf("the token leaked to the CDN: %q", a)
		}
	}
	if !slices.Contains(cdn.ranges, "bytes=5000-") {
		t.Errorf("the resume did not reach the CDN with its Range: %q", cdn.ranges)
	}
}

func TestPullRefusesRedirectLoops(t *testing.T) {
	h := newFakeHub(t, map[string]string{"config.json": "{}"})
	h.redirectLoop = true
	err := Pull(context.Background(), h.opts(t.TempDir()))
	if err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("got %v, want a refused redirect", err)
	}
	if n := h.resolves["config.json"]; n != maxRedirects+1 {
		t.Errorf("%d requests, want %d: a refused redirect is not retried", n, maxRedirects+1)
	}
}

func TestPullErrorsNameTheProblem(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(h *fakeHub)
		target error
		want   []string
	}{
		{"no such repo", func(h *fakeHub) { h.listStatus = 404 }, ErrNotFound, []string{"acme/tiny-model", "file list", "404", "no such model or file"}},
		{"gated", func(h *fakeHub) { h.listStatus = 401 }, ErrGated, []string{"401", "gated or private: set a token"}},
		{"forbidden file", func(h *fakeHub) { h.fileStatus["model.safetensors"] = 403 }, ErrGated, []string{"model.safetensors", "403", "gated or private"}},
		{"missing file", func(h *fakeHub) { h.fileStatus["config.json"] = 404 }, ErrNotFound, []string{"config.json", "404"}},
		{"hub error code", func(h *fakeHub) { h.listStatus, h.errorCode = 401, "RepoNotFound" }, ErrNotFound, []string{"401", "no such model"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHub(t, modelFiles, "model.safetensors")
			tc.setup(h)
			err := Pull(context.Background(), h.opts(t.TempDir()))
			if !errors.Is(err, tc.target) {
				t.Fatalf("got %v, want %v", err, tc.target)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestPullResumesAfterDroppedConnection(t *testing.T) {
	h := newFakeHub(t, modelFiles, "model.safetensors")
	h.dropAfter["model.safetensors"] = 10000
	dir := t.TempDir()
	if err := Pull(context.Background(), h.opts(dir)); err != nil {
		t.Fatal(err)
	}
	checkFolder(t, dir, wantedFiles())
	if !slices.Contains(h.ranges, "bytes=10000-") {
		t.Errorf("no resume from byte 10000; ranges sent: %q", h.ranges)
	}
}

func TestPullRetriesServerErrors(t *testing.T) {
	h := newFakeHub(t, modelFiles, "model.safetensors")
	h.fail5xx["config.json"] = 2
	dir := t.TempDir()
	if err := Pull(context.Background(), h.opts(dir)); err != nil {
		t.Fatal(err)
	}
	checkFolder(t, dir, wantedFiles())

	h.fail5xx["tokenizer.json"] = maxAttempts
	os.Remove(filepath.Join(dir, "tokenizer.json"))
	if err := Pull(context.Background(), h.opts(dir)); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("got %v, want the 503 after %d attempts", err, maxAttempts)
	}
}

func TestPullRestartsWhenServerIgnoresRange(t *testing.T) {
	h := newFakeHub(t, modelFiles, "model.safetensors")
	h.ignoreRange = true
	dir := t.TempDir()
	// A partial file whose bytes are wrong: resuming it would corrupt the
	// result, restarting from the 200's full body must not.
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.part"), bytes.Repeat([]byte("X"), 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Pull(context.Background(), h.opts(dir)); err != nil {
		t.Fatal(err)
	}
	checkFolder(t, dir, wantedFiles())
	if !slices.Contains(h.ranges, "bytes=5000-") {
		t.Errorf("the partial file was not offered for resuming: %q", h.ranges)
	}
}

func TestPullRejectsWrongChecksum(t *testing.T) {
	h := newFakeHub(t, modelFiles, "model.safetensors")
	h.wrongSHA["model.safetensors"] = true
	dir := t.TempDir()
	err := Pull(context.Background(), h.opts(dir))
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("got %v, want a checksum error naming the file", err)
	}
	for _, name := range []string{"model.safetensors", "model.safetensors.part"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s was left in place", name)
		}
	}
}

func TestPullRejectsWrongBlobAndOversizedBody(t *testing.T) {
	h := newFakeHub(t, map[string]string{"config.json": `{"a": 1}`})
	h.oversize["config.json"] = `{"a": 2}` // same size, other bytes: the git blob id catches it
	err := Pull(context.Background(), h.opts(t.TempDir()))
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("wrong content: got %v, want ErrChecksum", err)
	}
	h.oversize["config.json"] = `{"a": 1}` + strings.Repeat(" ", 100)
	err = Pull(context.Background(), h.opts(t.TempDir()))
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("oversized body: got %v, want ErrChecksum", err)
	}
}

func TestPullRefusesPathTraversal(t *testing.T) {
	for _, name := range []string{"../../etc/passwd", "/etc/passwd", "a/../../b.json", "..\\x.json", "C:/x.json", "a//b.json", "./x.json", "x\x00.json", "a/./b.json", "..", "dir/"} {
		t.Run(name, func(t *testing.T) {
			h := newFakeHub(t, map[string]string{"config.json": "{}"})
			h.extra = []treeEntry{{Type: "file", Path: name, Size: 2, OID: blobID([]byte("{}"))}}
			base := t.TempDir()
			dir := filepath.Join(base, "a", "b")
			err := Pull(context.Background(), h.opts(dir))
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("got %v, want ErrUnsafePath", err)
			}
			if _, err := os.Stat(filepath.Join(base, "etc")); !os.IsNotExist(err) {
				t.Error("something was written outside the destination")
			}
			if len(h.ranges) != 0 {
				t.Error("files were downloaded from a listing with an unsafe name")
			}
		})
	}
}

func TestPullStaysInsideDirDespiteSymlinks(t *testing.T) {
	h := newFakeHub(t, map[string]string{"sub/config.json": "{}"})
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	dir := filepath.Join(base, "dest")
	for _, d := range []string{outside, dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		t.Skip("no symlinks here:", err)
	}
	if err := Pull(context.Background(), h.opts(dir)); err == nil {
		t.Fatal("pulled through a symlink that leaves the destination")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("wrote %d files outside the destination", len(entries))
	}
}

func TestCancelLeavesPartThenResumes(t *testing.T) {
	h := newFakeHub(t, modelFiles, "model.safetensors")
	h.stallAfter["model.safetensors"] = 12345
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := h.opts(dir)
	opts.Progress = func(file string, done, total int64) {
		if file == "model.safetensors" && done == 12345 {
			cancel()
		}
	}
	err := Pull(ctx, opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	part, err := os.ReadFile(filepath.Join(dir, "model.safetensors.part"))
	if err != nil || string(part) != modelFiles["model.safetensors"][:12345] {
		t.Fatalf("partial file: %d bytes, %v; want the first 12345 bytes", len(part), err)
	}

	if err := Pull(context.Background(), h.opts(dir)); err != nil {
		t.Fatal(err)
	}
	checkFolder(t, dir, wantedFiles())
	if !slices.Contains(h.ranges, "bytes=12345-") {
		t.Errorf("the resume did not start at byte 12345: %q", h.ranges)
	}
}

func TestStalledTransferIsRetried(t *testing.T) {
	defer func(d time.Duration) { stallTimeout = d }(stallTimeout)
	stallTimeout = 100 * time.Millisecond
	h := newFakeHub(t, modelFiles, "model.safetensors")
	h.stallAfter["model.safetensors"] = 777
	dir := t.TempDir()
	if err := Pull(context.Background(), h.opts(dir)); err != nil {
		t.Fatal(err)
	}
	checkFolder(t, dir, wantedFiles())
	if !slices.Contains(h.ranges, "bytes=777-") {
		t.Errorf("no resume after the stall: %q", h.ranges)
	}
}

func TestListingLimitsAndPagination(t *testing.T) {
	h := newFakeHub(t, map[string]string{"config.json": "{}"})
	page2 := newFakeHub(t, map[string]string{"tokenizer.json": "{}"})
	page2.repo = h.repo
	// The next page must be on the hub's own server.
	h.nextPage = `<` + page2.srv.URL + `/api/models/acme/tiny-model/tree/main?recursive=1&cursor=x>; rel="next"`
	if _, err := List(context.Background(), h.opts("")); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Errorf("got %v, want the foreign next page refused", err)
	}

	h.nextPage = `</api/models/acme/tiny-model/tree/main?recursive=1&cursor=x>; rel="next"`
	if _, err := List(context.Background(), h.opts("")); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("got %v: a page repeating itself must be caught", err)
	}

	h.nextPage = ""
	defer func(n int64) { maxListingBytes = n }(maxListingBytes)
	maxListingBytes = 64
	if _, err := List(context.Background(), h.opts("")); err == nil || !strings.Contains(err.Error(), "file list: more than the 64-byte limit") {
		t.Errorf("got %v, want the listing size cap", err)
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, repo := range []string{"", "name", "a/b/c", "../b", "a/..", "a/b?x=1", "a b/c", "a/b\n", "./b", strings.Repeat("a", 97) + "/b"} {
		if err := ValidateRepo(repo); !errors.Is(err, ErrBadRepo) {
			t.Errorf("ValidateRepo(%q) = %v, want ErrBadRepo", repo, err)
		}
	}
	for _, repo := range []string{"Qwen/Qwen3-0.6B", "mlx-community/SmolLM2-135M-Instruct-4bit", "meta-llama/Llama-3.2-1B-Instruct", "a_b/c.d"} {
		if err := ValidateRepo(repo); err != nil {
			t.Errorf("ValidateRepo(%q) = %v", repo, err)
		}
	}
	for _, opts := range []PullOptions{
		{Repo: "a/b", Revision: "../main"},
		{Repo: "a/b", Endpoint: "ftp://hub"},
		{Repo: "a/b", Endpoint: "https://user:pw@hub"},
		{Repo: "a/b", Endpoint: "hub.example"},
	} {
		if _, err := List(context.Background(), opts); err == nil {
			t.Errorf("%+v: no error", opts)
		}
	}
}

func TestEndpointFromEnvironment(t *testing.T) {
	h := newFakeHub(t, map[string]string{"config.json": "{}"})
	t.Setenv("HF_ENDPOINT", h.srv.URL+"/")
	opts := h.opts("")
	opts.Endpoint = ""
	files, err := List(context.Background(), opts)
	if err != nil || len(files) != 1 || files[0].Path != "config.json" || files[0].BlobID != blobID([]byte("{}")) {
		t.Fatalf("got %+v, %v", files, err)
	}
}
