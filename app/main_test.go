package app

import (
	"os"
	"testing"
)

// TestMain keeps every test's workspace out of the user's real data directory.
func TestMain(m *testing.M) {
	home, err := os.MkdirTemp("", "inloop-app-test-")
	if err != nil {
		panic(err)
	}
	os.Setenv("INLOOP_HOME", home)
	code := m.Run()
	os.RemoveAll(home)
	os.Exit(code)
}
