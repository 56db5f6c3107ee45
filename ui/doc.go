// Package ui is Inloop's window: one file per screen (models, data, train, chat,
// runs) and a few small widgets (a line chart, a progress row). It talks only to
// app's Workspace, never to the engine, and changes widgets only through fyne.Do
// from the goroutines that watch jobs and replies.
package ui
