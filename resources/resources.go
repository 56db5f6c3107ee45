// Package resources holds the files Inloop ships inside its binary: the bundled
// demo model (a tiny Llama-architecture model pretrained by Inloop itself on
// public-domain English; see demo/README.md and demo/SOURCES.md) and the sample
// decision task (tasks/tickets).
package resources

import (
	"embed"
	"io/fs"
)

//go:embed demo/*
var demo embed.FS

// DemoFS returns the demo model's folder: config.json, model.safetensors,
// tokenizer.json, tokenizer_config.json, words.txt and the documentation, at
// its root.
func DemoFS() fs.FS {
	sub, err := fs.Sub(demo, "demo")
	if err != nil {
		panic(err)
	}
	return sub
}

//go:embed tasks/tickets/task.json tasks/tickets/rows.jsonl
var tasks embed.FS

// TicketsTask returns the sample decision task: task.json (two questions, team
// and refund) and rows.jsonl (2,000 support tickets from the seeded generator in
// tasks/tickets).
func TicketsTask() (task, rows []byte) {
	task, err := tasks.ReadFile("tasks/tickets/task.json")
	if err != nil {
		panic(err)
	}
	rows, err = tasks.ReadFile("tasks/tickets/rows.jsonl")
	if err != nil {
		panic(err)
	}
	return task, rows
}
