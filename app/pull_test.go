package app

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPullCommand runs `inloop pull` against a local stand-in for the hub: the
// command wires flags, destination and progress to hub.Pull (tested in depth there).
func TestPullCommand(t *testing.T) {
	weights := bytes.Repeat([]byte("w"), 4096)
	sum := sha256.Sum256(weights)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/models/org/tiny/tree/main":
			fmt.Fprintf(w, `[{"type":"file","path":"model.safetensors","size":%d,"lfs":{"oid":"%s","size":%d}}]`,
				len(weights), hex.EncodeToString(sum[:]), len(weights))
		case "/org/tiny/resolve/main/model.safetensors":
			w.Write(weights)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	home := t.TempDir()
	var out, errb bytes.Buffer
	if code := Main([]string{"pull", "--data-dir", home, "--endpoint", srv.URL, "org/tiny"}, &out, &errb); code != 0 {
		t.Fatalf("pull exited %d: %s", code, errb.String())
	}
	got, err := os.ReadFile(filepath.Join(home, "models", "org--tiny", "model.safetensors"))
	if err != nil || !bytes.Equal(got, weights) {
		t.Fatalf("downloaded file: %v, %d bytes", err, len(got))
	}
	if !strings.Contains(out.String(), "org/tiny is in") {
		t.Errorf("output lacks the destination: %q", out.String())
	}
	if code := Main([]string{"pull", "--data-dir", home, "--endpoint", srv.URL, "org/missing"}, &out, &errb); code == 0 {
		t.Errorf("pull of a missing model succeeded")
	}
}
