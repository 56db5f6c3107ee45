package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/store"
)

// Phase says what a Progress event reports.
type Phase string

const (
	PhaseInfo       Phase = "info"       // a line worth showing: what was loaded, an estimate
	PhaseWarning    Phase = "warning"    // something the user should know, the job goes on
	PhaseTrain      Phase = "train"      // a training report: loss, learning rate, speed
	PhaseVal        Phase = "val"        // a validation loss
	PhaseTest       Phase = "test"       // the test loss at the end
	PhaseCheckpoint Phase = "checkpoint" // a checkpoint was saved (Path)
	PhaseDownload   Phase = "download"   // bytes of one file (File, Done, Total)
	PhaseDone       Phase = "done"       // the job finished; Message sums it up
)

// Progress is the one event type every job reports, in the command line and the
// window alike. Fields that do not apply to a phase are zero.
type Progress struct {
	RunID int64
	Kind  store.RunKind
	Phase Phase
	Time  time.Time

	Message string
	Path    string

	Step, Steps  int // training: this update and the last one
	Loss         float64
	ValLoss      float64
	TestLoss     float64
	LR           float64
	TokensPerSec float64
	Tokens       int64
	PeakMemory   int64
	ETA          time.Duration
	// Values are further figures of this update by name, e.g. a decision
	// model's held-out accuracy per question ("accuracy/team").
	Values map[string]float64

	File        string // download
	Done, Total int64
}

// Job is one running job. Its events arrive on Events, which is closed when the
// job ends; Wait returns how it ended. Drain Events (or let a goroutine do it):
// a job waits for its reader.
type Job struct {
	RunID  int64
	Kind   store.RunKind
	Events <-chan Progress

	cancel context.CancelFunc
	done   chan struct{}
	err    error
	result json.RawMessage
}

// Cancel asks the job to stop; a training job keeps its last checkpoint.
func (j *Job) Cancel() { j.cancel() }

// Wait blocks until the job has ended and returns its error (nil when done).
func (j *Job) Wait() error {
	<-j.done
	return j.err
}

// Result is the job's final figures as stored with its run (after Wait).
func (j *Job) Result() json.RawMessage {
	<-j.done
	return j.result
}

// jobFunc does a job's work, reporting through emit, and returns its final
// figures (stored as the run's result) and the path of what it produced.
type jobFunc func(ctx context.Context, runID int64, emit func(Progress)) (result any, output string, err error)

// start records run (or takes an existing one, for a resume) and runs fn in the
// background under a new Job.
func (w *Workspace) start(ctx context.Context, run store.Run, fn jobFunc) (*Job, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, ErrClosed
	}
	if run.ID != 0 && w.jobs[run.ID] != nil {
		w.mu.Unlock()
		return nil, fmt.Errorf("run %d is already running", run.ID)
	}
	w.mu.Unlock()
	var err error
	if run.ID == 0 {
		run.Status = store.StatusQueued
		if run.ID, err = w.Store.CreateRun(ctx, run); err != nil {
			return nil, err
		}
	}
	if err := w.Store.UpdateRunStatus(ctx, run.ID, store.StatusRunning, ""); err != nil {
		return nil, err
	}
	jctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel) // the caller's context still cancels the job
	events := make(chan Progress, 64)
	j := &Job{RunID: run.ID, Kind: run.Kind, Events: events, cancel: cancel, done: make(chan struct{})}
	w.mu.Lock()
	w.jobs[run.ID] = j
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		defer stop()
		emit := func(p Progress) {
			p.RunID, p.Kind = run.ID, run.Kind
			if p.Time.IsZero() {
				p.Time = time.Now()
			}
			select {
			case events <- p:
			case <-jctx.Done():
				select { // a last word still goes out if there is room
				case events <- p:
				default:
				}
			}
		}
		result, output, err := fn(jctx, run.ID, emit)
		out := store.RunOutcome{Status: store.StatusDone, Output: output}
		if result != nil {
			out.Result, _ = json.Marshal(result)
		}
		switch {
		case err == nil:
			emit(Progress{Phase: PhaseDone, Message: "done", Path: output})
		case jctx.Err() != nil && errors.Is(err, context.Canceled):
			out.Status, out.Error = store.StatusCancelled, err.Error()
		default:
			out.Status, out.Error = store.StatusFailed, err.Error()
		}
		// Record the end even when the caller's context is gone.
		if ferr := w.Store.FinishRun(context.WithoutCancel(ctx), run.ID, out); ferr != nil && err == nil {
			err = ferr
		}
		w.mu.Lock()
		delete(w.jobs, run.ID)
		idle := len(w.jobs) == 0
		w.mu.Unlock()
		if idle {
			w.releaseMemory()
		}
		j.err, j.result = err, out.Result
		close(events)
		close(j.done)
		cancel()
	}()
	return j, nil
}

// releaseMemory hands back to the system the memory a finished job's arrays held. The
// backends keep freed buffers for the next step (the cpu backend's C heap no longer
// trims itself, so that a training step does not fault its working set in again), and
// without this a finished run would keep its peak for as long as the app is open. The
// job's arrays are garbage now: Sweep frees them, then the cache goes.
func (w *Workspace) releaseMemory() {
	mx.Sweep(w.Backend)
	mx.ClearCache(w.Backend)
}

// idleRelease is how long after a chat's last turn or feedback the memory its
// arrays used goes back to the system (releaseMemory), if no job runs then and
// no other turn has begun. A conversation in progress keeps its buffers, as a
// training run does between steps; a chat left alone gives back its peak
// (a test-time training step on a large model holds gigabytes).
var idleRelease = 30 * time.Second

// chatBusy marks a chat turn or feedback step as running until the returned
// function is called; when the last one ends, releaseMemory is scheduled for
// idleRelease later.
func (w *Workspace) chatBusy() (done func()) {
	w.idleMu.Lock()
	w.chatActive++
	if w.idleTimer != nil {
		w.idleTimer.Stop()
	}
	w.idleMu.Unlock()
	return func() {
		w.idleMu.Lock()
		defer w.idleMu.Unlock()
		if w.chatActive--; w.chatActive > 0 {
			return
		}
		// The last timer was stopped when this turn began.
		w.idleTimer = time.AfterFunc(idleRelease, func() {
			w.idleMu.Lock()
			busy := w.chatActive > 0
			w.idleMu.Unlock()
			w.mu.Lock()
			busy = busy || len(w.jobs) > 0 || w.closed
			w.mu.Unlock()
			if !busy {
				w.releaseMemory()
			}
		})
	}
}

// Job returns the running job of a run, or nil.
func (w *Workspace) Job(runID int64) *Job {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.jobs[runID]
}

// Resume continues a run that was interrupted, failed or cancelled: a training
// run from its last good checkpoint, a download from the bytes it has, a
// quantization from the start.
func (w *Workspace) Resume(ctx context.Context, runID int64) (*Job, error) {
	run, err := w.Store.Run(ctx, runID)
	if err != nil {
		return nil, err
	}
	if run.Status == store.StatusDone {
		return nil, fmt.Errorf("run %d is done; there is nothing to resume", runID)
	}
	if run.Status == store.StatusRunning || w.Job(runID) != nil {
		return nil, fmt.Errorf("run %d is running", runID)
	}
	switch run.Kind {
	case store.KindTrain:
		var spec TrainSpec
		if err := json.Unmarshal(run.Params, &spec); err != nil {
			return nil, fmt.Errorf("run %d: its parameters cannot be read: %w", runID, err)
		}
		spec.Resume = true
		return w.startTrain(ctx, run, spec)
	case store.KindQuantize:
		var spec QuantizeSpec
		if err := json.Unmarshal(run.Params, &spec); err != nil {
			return nil, fmt.Errorf("run %d: its parameters cannot be read: %w", runID, err)
		}
		return w.startQuantize(ctx, run, spec)
	case store.KindPull:
		var spec PullSpec
		if err := json.Unmarshal(run.Params, &spec); err != nil {
			return nil, fmt.Errorf("run %d: its parameters cannot be read: %w", runID, err)
		}
		return w.startPull(ctx, run, spec)
	}
	return nil, fmt.Errorf("run %d: a %s run cannot be resumed", runID, run.Kind)
}
