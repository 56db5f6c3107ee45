// Command inloop adapts a language model on the user's own machine. With no
// arguments it opens the app; with a subcommand it runs the same job headless.
package main

import (
	"os"

	"github.com/inloop/inloop/app"
)

func main() { os.Exit(app.Main(os.Args[1:], os.Stdout, os.Stderr)) }
