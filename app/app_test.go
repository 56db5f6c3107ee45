package app

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference"
)

func TestDoctor(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"doctor", "--backend", "cpu"}, &out, &errb); code != 0 {
		t.Fatalf("doctor exited %d: %s", code, errb.String())
	}
	for _, want := range []string{"backend in use: cpu (", "--int8-decode: ", "self-check: matmul, reduction and gradient ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Errorf("got exit %d, stderr %q; want 2 and an unknown-command message", code, errb.String())
	}
	if code := Main([]string{"doctor", "--backend", "nope"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "unknown backend") {
		t.Errorf("bad backend: got exit %d, stderr %q", code, errb.String())
	}
}

func TestDefaultJob(t *testing.T) {
	t.Setenv("INLOOP_HOME", t.TempDir())
	var out, errb bytes.Buffer
	if code := Main(nil, &out, &errb); code != 0 {
		t.Fatalf("default job exited %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "self-check") || !strings.Contains(out.String(), "demo model continues") {
		t.Errorf("default job output:\n%s", out.String())
	}
}

func TestUserMessageDropsPackagePrefixes(t *testing.T) {
	err := fmt.Errorf("inference: forward: %w", fmt.Errorf("mlxbridge: %w", errors.New("inference: the metadata: field is bad")))
	if got, want := UserMessage(err), "the metadata: field is bad"; got != want {
		t.Errorf("UserMessage = %q, want %q", got, want)
	}
	ce := fmt.Errorf("inference: reply: %w", &inference.ContextError{Tokens: 600, Limit: 512})
	if got, want := UserMessage(ce), "the prompt is 600 tokens and this model reads at most 512"; got != want {
		t.Errorf("UserMessage = %q, want %q", got, want)
	}
}
