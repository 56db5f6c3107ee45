package ui

import (
	"context"
	"testing"

	"fyne.io/fyne/v2/test"

	"github.com/inloop/inloop/app"
)

// BenchmarkFirstPaint is the window built over an open Workspace and painted once
// (the software renderer of fyne/test standing in for the GL one): what a user
// waits for between launch and a usable window, less the process start.
// go test -run '^$' -bench . ./ui/
func BenchmarkFirstPaint(b *testing.B) {
	ws, err := app.Open(context.Background(), app.Options{DataDir: b.TempDir(), Backend: "cpu"})
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	a := test.NewApp()
	defer a.Quit()
	b.ResetTimer()
	for b.Loop() {
		u := New(a, ws)
		u.Win.Canvas().Capture()
		u.Win.Close()
	}
}

// BenchmarkSwitchScreens is one switch to each of the five screens, painted.
func BenchmarkSwitchScreens(b *testing.B) {
	ws, err := app.Open(context.Background(), app.Options{DataDir: b.TempDir(), Backend: "cpu"})
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	a := test.NewApp()
	defer a.Quit()
	u := New(a, ws)
	u.Win.Show()
	b.ResetTimer()
	for b.Loop() {
		for _, name := range []string{"Models", "Data", "Train", "Runs", "Chat"} {
			u.show(name)
			u.Win.Canvas().Capture()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/5/1000, "ms/switch")
}
