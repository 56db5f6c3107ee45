package app

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/inloop/inloop/internal/atomicfile"
	"github.com/inloop/inloop/training/decide"
)

// Task files the user defined in the window live in the data directory's
// decide/tasks folder, one JSON file each, named after the task.

// SaveDecisionTask checks raw as a task file and writes it to the workspace's
// task folder, returning its path. An existing task of that name is replaced.
func (w *Workspace) SaveDecisionTask(raw []byte) (string, error) {
	t, err := decide.ParseTask(raw)
	if err != nil {
		return "", err
	}
	dir := w.path("decide", "tasks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, safeName(t.Name)+".json")
	if err := atomicfile.WriteFile(path, raw, 0o644); err != nil {
		return "", fmt.Errorf("saving the task: %w", err)
	}
	return path, nil
}

// DecisionTaskFiles lists the task files in the workspace's task folder, by name.
func (w *Workspace) DecisionTaskFiles() []string {
	ents, _ := os.ReadDir(w.path("decide", "tasks"))
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") {
			out = append(out, w.path("decide", "tasks", e.Name()))
		}
	}
	slices.Sort(out)
	return out
}

// TaskSummary describes a task's questions in one line: "team (billing,
// technical, sales, account); refund (yes/no)".
func TaskSummary(t *DecisionTaskFile) string {
	var parts []string
	for _, q := range t.Questions {
		names := make([]string, len(q.Options))
		for i, o := range q.Options {
			names[i] = o.Name
		}
		sep := ", "
		if q.Type == decide.YesNo {
			sep = "/"
		}
		parts = append(parts, q.Name+" ("+strings.Join(names, sep)+")")
	}
	return strings.Join(parts, "; ")
}
