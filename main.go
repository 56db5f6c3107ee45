// Command inloop adapts a language model on the user's own machine. With no
// arguments it opens the app; with a subcommand it runs the same job headless.
package main

import (
	"context"
	"os"

	"github.com/inloop/inloop/app"
)

func main() { os.Exit(app.Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
