package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DataDir returns Inloop's data directory: the flag if given, else $INLOOP_HOME,
// else the user's config directory + "/Inloop". It is created if missing.
func DataDir(flagValue string) (string, error) {
	dir := flagValue
	if dir == "" {
		dir = os.Getenv("INLOOP_HOME")
	}
	if dir == "" {
		base, err := os.UserConfigDir()
		if err != nil {
			return "", fmt.Errorf("data directory: %w (set INLOOP_HOME)", err)
		}
		dir = filepath.Join(base, "Inloop")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("data directory: %w", err)
	}
	return dir, nil
}

// modelDir is where a pulled model lives: models/org--name under the data directory.
func modelDir(dataDir, repo string) string {
	return filepath.Join(dataDir, "models", strings.ReplaceAll(repo, "/", "--"))
}
