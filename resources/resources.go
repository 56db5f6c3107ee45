// Package resources holds the files Inloop ships inside its binary: the bundled
// demo model (a tiny Llama-architecture model pretrained by Inloop itself on
// public-domain English; see demo/README.md and demo/SOURCES.md).
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
