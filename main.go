// Command inloop adapts a language model on the user's own machine. With no
// arguments it opens the window; with a subcommand it runs the same job headless
// through the same Workspace.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"

	fyneapp "fyne.io/fyne/v2/app"

	"github.com/inloop/inloop/app"
	"github.com/inloop/inloop/ui"
)

func main() {
	if len(os.Args) > 1 || !hasDisplay() {
		if len(os.Args) == 1 {
			fmt.Fprintln(os.Stderr, "inloop: no display to open a window on, so here is the headless check ('inloop help' lists the commands)")
		}
		os.Exit(app.Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	ws, err := app.Open(context.Background(), app.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "inloop:", err)
		os.Exit(1)
	}
	defer ws.Close()
	ui.New(fyneapp.NewWithID(ui.AppID), ws).ShowAndRun()
}

// hasDisplay says whether a window can open: on Linux and the BSDs only with an X
// or Wayland display.
func hasDisplay() bool {
	switch runtime.GOOS {
	case "darwin", "windows":
		return true
	}
	return os.Getenv("DISPLAY") != "" || os.Getenv("WAYLAND_DISPLAY") != ""
}
