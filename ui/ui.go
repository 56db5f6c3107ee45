package ui

import (
	"context"
	"errors"
	"strings"
	"sync"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/driver/desktop"
	"fyne.io/fyne/v2/theme"

	"github.com/inloop/inloop/app"
)

// AppID is the application's identifier (FyneApp.toml, preferences, bundle).
const AppID = "app.inloop.desktop"

// UI is Inloop's window over one Workspace.
type UI struct {
	App fyne.App
	Win fyne.Window
	ws  *app.Workspace

	ctx    context.Context // ends when the window closes: stops watchers and jobs' readers
	cancel context.CancelFunc

	// mu is held by every change made from a background goroutine (see do). In the
	// app fyne.Do already runs them one at a time on the UI goroutine; the test
	// driver runs them at once on the caller's goroutine, and tests take mu too.
	mu sync.Mutex

	tabs   *container.AppTabs
	chat   *chatScreen
	models *modelsScreen
	data   *dataScreen
	train  *trainScreen
	decide *decideScreen
	adapt  *adaptScreen
	runs   *runsScreen
}

// New builds the window; ShowAndRun shows it.
func New(a fyne.App, ws *app.Workspace) *UI {
	u := &UI{App: a, ws: ws}
	u.ctx, u.cancel = context.WithCancel(context.Background())
	u.Win = a.NewWindow("Inloop")
	u.Win.SetContent(u.build())
	u.Win.Resize(fyne.NewSize(1100, 720))
	u.Win.SetOnClosed(u.cancel)
	u.Win.Canvas().AddShortcut(&desktop.CustomShortcut{KeyName: fyne.KeyN, Modifier: fyne.KeyModifierShortcutDefault}, func(fyne.Shortcut) {
		u.tabs.Select(u.tabs.Items[0])
		u.chat.newChat()
	})
	return u
}

// ShowAndRun shows the window and runs the app until it is closed.
func (u *UI) ShowAndRun() { u.Win.ShowAndRun() }

// The screens, in the order of the navigation.
func (u *UI) build() fyne.CanvasObject {
	u.chat = newChatScreen(u)
	u.models = newModelsScreen(u)
	u.data = newDataScreen(u)
	u.train = newTrainScreen(u)
	u.decide = newDecideScreen(u)
	u.adapt = newAdaptScreen(u)
	u.runs = newRunsScreen(u)
	u.tabs = container.NewAppTabs(
		container.NewTabItemWithIcon("Chat", theme.MailComposeIcon(), u.chat.content),
		container.NewTabItemWithIcon("Models", theme.StorageIcon(), u.models.content),
		container.NewTabItemWithIcon("Data", theme.FolderOpenIcon(), u.data.content),
		container.NewTabItemWithIcon("Train", theme.MediaPlayIcon(), u.train.content),
		container.NewTabItemWithIcon("Decide", theme.ConfirmIcon(), u.decide.content),
		container.NewTabItemWithIcon("Adapt", theme.ViewRefreshIcon(), u.adapt.content),
		container.NewTabItemWithIcon("Runs", theme.ListIcon(), u.runs.content),
	)
	u.tabs.SetTabLocation(container.TabLocationLeading)
	u.tabs.OnSelected = func(t *container.TabItem) {
		switch t.Text {
		case "Models":
			u.models.refresh()
		case "Runs":
			u.runs.refresh()
		case "Train":
			u.train.refreshModels()
		case "Chat":
			u.chat.refreshModels()
		case "Data":
			u.data.refreshModels()
		case "Decide":
			u.decide.refresh()
		case "Adapt":
			u.adapt.refresh()
		}
	}
	return u.tabs
}

// do runs fn on the UI goroutine: what background goroutines (jobs, replies,
// watchers) use to change widgets.
func (u *UI) do(fn func()) {
	fyne.Do(func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		fn()
	})
}

// follow hands a job's progress to onProgress and then its outcome to done,
// each on the UI goroutine (do), from a goroutine that drains the job.
func (u *UI) follow(job *app.Job, onProgress func(app.Progress), done func(error)) {
	go func() {
		for p := range job.Events {
			u.do(func() { onProgress(p) })
		}
		err := job.Wait()
		u.do(func() { done(err) })
	}()
}

// show switches to the named screen.
func (u *UI) show(name string) {
	for _, t := range u.tabs.Items {
		if t.Text == name {
			u.tabs.Select(t)
			return
		}
	}
}

// showError tells the user what failed where they are looking, as one sentence,
// with what to do next when we know it.
func (u *UI) showError(what string, err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	msg := app.UserMessage(err)
	if what != "" {
		msg = what + ": " + msg
	}
	d := dialog.NewError(errors.New(capitalize(msg)), u.Win)
	d.Show()
}

// modelNames lists the registered models by name, the demo first.
func (u *UI) modelNames() []string {
	ms, err := u.ws.Models(u.ctx)
	if err != nil {
		return []string{"demo"}
	}
	names := []string{}
	for _, m := range ms {
		if m.Name == "demo" {
			names = append([]string{m.Name}, names...)
		} else {
			names = append(names, m.Name)
		}
	}
	return names
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
