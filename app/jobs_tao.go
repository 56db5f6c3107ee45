package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/inloop/inloop/adapt/tao"
	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/internal/capped"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/store"
	"github.com/inloop/inloop/training/decide"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/trainer"
)

// TAO through the Workspace: a background job (a run of kind tao) that takes
// the prompts people sent a model in their chats (and a prompt file), runs one
// round of adapt/tao on the model's adapter — the latest version in the store,
// or a fresh one — and, when the held-out reward check improves, saves the
// trained adapter as the model's next adapter version. Every round is an
// adaptation event with the report; UndoTAO takes a kept round back as one
// more version. The command line is `inloop tao`.

// Judge settings of TAOSpec.Judge.
const (
	JudgeAuto = "auto" // train one from the feedback history when it has enough ratings
	JudgeOff  = "off"
)

// maxPromptFile caps a prompt file read whole.
const maxPromptFile = 256 << 20

// TAOSpec is one TAO round. Model is required.
type TAOSpec struct {
	Model string `json:"model"`
	// Prompts is a prompt file (tao.ParsePrompts: a prompt per line, or
	// JSONL with "prompt"), used beside the prompts of the model's chats;
	// NoChats leaves the chats out.
	Prompts string `json:"prompts,omitempty"`
	NoChats bool   `json:"no_chats,omitempty"`
	// Format, when set, is the reward: a regular expression the answer must
	// match (1 or 0), for tasks whose format is known. Otherwise the reward is
	// tao.Combined over the judge, the feedback history and the checks.
	Format string `json:"format,omitempty"`
	// Judge is JudgeAuto (the default), JudgeOff, or a saved decision model's
	// folder whose task has a yes/no question about tao.JudgeState's text.
	Judge string `json:"judge,omitempty"`

	System       string  `json:"system,omitempty"` // the chats' system prompt
	Candidates   int     `json:"candidates,omitempty"`
	MaxTokens    int     `json:"max_tokens,omitempty"`
	Heldout      float64 `json:"heldout,omitempty"`
	EvalSamples  int     `json:"eval_samples,omitempty"`
	Epochs       int     `json:"epochs,omitempty"`
	BatchSize    int     `json:"batch_size,omitempty"`
	LearningRate float64 `json:"learning_rate,omitempty"`
	Preference   float64 `json:"preference,omitempty"`
	MinGain      float64 `json:"min_gain,omitempty"`
	Rank         int     `json:"rank,omitempty"` // of a fresh adapter
	Seed         uint64  `json:"seed,omitempty"`
}

func (s TAOSpec) options() tao.Options {
	return tao.Options{Candidates: s.Candidates, System: s.System, MaxTokens: s.MaxTokens, Heldout: s.Heldout,
		EvalSamples: s.EvalSamples, Epochs: s.Epochs, BatchSize: s.BatchSize, LearningRate: s.LearningRate,
		Preference: s.Preference, MinGain: s.MinGain, LoRA: lora.Config{Rank: s.Rank, Seed: s.Seed}, Seed: s.Seed}
}

// TAOReport is a TAO run's result, as stored with the run and its event.
type TAOReport struct {
	tao.Result
	ChatPrompts int    `json:"chat_prompts"`
	FilePrompts int    `json:"file_prompts"`
	Rated       int    `json:"rated"`        // rated replies in the feedback history
	Judge       string `json:"judge"`        // what judged: "", a folder, or "trained on N ratings"
	EventID     int64  `json:"event_id"`     // the adaptation event
	Version     int    `json:"version"`      // the model's adapter version after the round (the store's numbering)
	AdapterPath string `json:"adapter_path"` // the new version's folder, when kept
	// PerCandidateMS and ScorePerCandidateMS are the mean generation and
	// scoring times of a candidate; StepMS the mean training step.
	PerCandidateMS      float64 `json:"per_candidate_ms"`
	ScorePerCandidateMS float64 `json:"score_per_candidate_ms"`
	StepMS              float64 `json:"step_ms"`
}

// StartTAO starts a TAO round as a background job.
func (w *Workspace) StartTAO(ctx context.Context, spec TAOSpec) (*Job, error) {
	if spec.Model == "" {
		return nil, errors.New("a TAO round needs a model")
	}
	if spec.Format != "" {
		if _, err := tao.NewFormat(spec.Format); err != nil {
			return nil, err
		}
	}
	info, err := w.ResolveModel(ctx, spec.Model)
	if err != nil {
		return nil, err
	}
	params, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	run := store.Run{Kind: store.KindTAO, Model: info.Name, ModelID: info.ID, Dataset: spec.Prompts, Params: params}
	return w.start(ctx, run, func(ctx context.Context, runID int64, emit func(Progress)) (any, string, error) {
		return w.taoRound(ctx, runID, info, spec, emit)
	})
}

func (w *Workspace) taoRound(ctx context.Context, runID int64, info store.Model, spec TAOSpec, emit func(Progress)) (any, string, error) {
	rep := TAOReport{}
	say := func(format string, args ...any) {
		emit(Progress{Phase: PhaseInfo, Message: fmt.Sprintf(format, args...)})
	}
	var prompts []string
	if !spec.NoChats {
		ps, err := w.chatPrompts(ctx, info.Name)
		if err != nil {
			return nil, "", err
		}
		prompts, rep.ChatPrompts = ps, len(ps)
	}
	if spec.Prompts != "" {
		raw, err := capped.ReadFile(spec.Prompts, maxPromptFile)
		if err != nil {
			return nil, "", fmt.Errorf("prompts: %w", err)
		}
		ps, err := tao.ParsePrompts(strings.NewReader(string(raw)))
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", spec.Prompts, err)
		}
		prompts, rep.FilePrompts = append(prompts, ps...), len(ps)
	}
	say("%d prompts from chats, %d from the prompt file", rep.ChatPrompts, rep.FilePrompts)

	base, _, err := w.SharedModel(ctx, info.Name)
	if err != nil {
		return nil, "", err
	}
	m := base.Fork()
	before, ac, err := w.userAdapter(ctx, m, info.Name)
	if err != nil {
		return nil, "", err
	}
	replier, err := inference.LoadReplier(m, info.Path)
	if err != nil {
		return nil, "", err
	}
	reward, err := w.taoReward(ctx, base, replier, info, spec, &rep, say)
	if err != nil {
		return nil, "", err
	}
	opts := spec.options()
	res, err := tao.Round(ctx, m, replier, prompts, reward, opts, func(ev trainer.Event) {
		w.recordTrainEvent(ctx, runID, ev)
		if ev.Kind != trainer.EventDone {
			emit(trainProgress(ev))
		}
	})
	rep.Result = res
	rep.PerCandidateMS, rep.ScorePerCandidateMS = res.PerCandidateMS(), res.ScorePerCandidateMS()
	for _, s := range res.Steps {
		rep.StepMS += s.MS / float64(len(res.Steps))
	}
	rep.Version = before
	if err != nil {
		return rep, "", err
	}
	bg := context.WithoutCancel(ctx)
	if res.Kept {
		if ac == nil {
			if ac, err = lora.AdapterConfig(base, opts.LoRA); err != nil {
				return rep, "", err
			}
		}
		dir := w.path("adapters", fmt.Sprintf("%s-tao-%s-run%d", safeName(info.Name), stamp(), runID))
		if err := lora.SaveArrays(dir, res.Adapter.Params(), ac); err != nil {
			return rep, "", fmt.Errorf("the round improved the adapter but it could not be saved: %w", err)
		}
		a, err := w.Store.AddAdapter(bg, store.Adapter{Model: info.Name, Name: "TAO", Path: dir, ParentVersion: before, RunID: runID})
		if err != nil {
			return rep, dir, err
		}
		rep.Version, rep.AdapterPath = a.Version, dir
	}
	now := time.Now()
	_ = w.Store.AddMetrics(bg, []store.Metric{
		{RunID: runID, Name: "heldout_reward_before", Value: res.Check.Before, Time: now},
		{RunID: runID, Name: "heldout_reward_after", Value: res.Check.After, Time: now},
		{RunID: runID, Name: "candidates", Value: float64(res.Candidates), Time: now},
	})
	detail, _ := json.Marshal(rep)
	if rep.EventID, err = w.Store.AddAdaptationEvent(bg, store.AdaptationEvent{Model: info.Name, Method: store.MethodTAO, MS: res.TotalMS,
		VersionBefore: before, VersionAfter: rep.Version, Detail: detail}); err != nil {
		return rep, rep.AdapterPath, err
	}
	return rep, rep.AdapterPath, nil
}

// userAdapter pushes the model's latest adapter version from the store onto m
// and returns its version and config; 0 and nil when it has none.
func (w *Workspace) userAdapter(ctx context.Context, m *inference.Model, model string) (int, *inference.AdapterConfig, error) {
	a, err := w.Store.LatestAdapter(ctx, model)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	ad, ac, err := inference.ReadAdapter(m, a.Path)
	if err != nil {
		return 0, nil, fmt.Errorf("adapter version %d of %s: %w", a.Version, model, err)
	}
	if _, err := m.PushAdapter(ad); err != nil {
		return 0, nil, err
	}
	return a.Version, ac, nil
}

// taoReward is the round's reward: the spec's format, or the judge, the
// feedback history and the checks combined (tao.NewCombined).
func (w *Workspace) taoReward(ctx context.Context, base *inference.Model, rep *inference.Replier, info store.Model, spec TAOSpec, report *TAOReport, say func(string, ...any)) (tao.Reward, error) {
	if spec.Format != "" {
		return tao.NewFormat(spec.Format)
	}
	rated, err := w.ratedReplies(ctx, info.Name)
	if err != nil {
		return nil, err
	}
	report.Rated = len(rated)
	// The judge and the history read the bare model, never the adapter the
	// round trains.
	bare := base.Fork()
	var judge *tao.Judge
	switch spec.Judge {
	case JudgeOff:
	case "", JudgeAuto:
		dm, res, err := tao.TrainJudge(ctx, bare, rep.Tokenizer, rated, decide.Options{Seed: spec.Seed}, nil)
		switch {
		case errors.Is(err, tao.ErrTooFewRatings):
			say("no judge: %d rated replies, want at least %d with thumbs both ways", len(rated), tao.MinJudgeRows)
		case err != nil:
			return nil, fmt.Errorf("judge: %w", err)
		default:
			if judge, err = tao.NewJudge(dm, ""); err != nil {
				return nil, err
			}
			report.Judge = fmt.Sprintf("trained on %d ratings (%d steps)", res.TrainRows+res.Heldout, res.Steps)
			say("judge %s", report.Judge)
		}
	default:
		dm, err := decide.Load(spec.Judge, bare, rep.Tokenizer)
		if err != nil {
			return nil, fmt.Errorf("judge: %w", err)
		}
		if judge, err = tao.NewJudge(dm, ""); err != nil {
			return nil, err
		}
		report.Judge = spec.Judge
	}
	var history *tao.History
	if len(rated) > 0 {
		if history, err = tao.NewHistory(ctx, bare, rep.Tokenizer, rated, 0); err != nil {
			return nil, err
		}
	}
	c := tao.NewCombined(judge, history, tao.Checks{})
	say("reward: %s", c.Name())
	return c, nil
}

// chatPrompts lists the user's messages in the chats with model, oldest chat
// first.
func (w *Workspace) chatPrompts(ctx context.Context, model string) ([]string, error) {
	chats, err := w.Store.Chats(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for i := len(chats) - 1; i >= 0; i-- {
		if chats[i].Model != model {
			continue
		}
		msgs, err := w.Store.Messages(ctx, chats[i].ID)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.Role == "user" {
				out = append(out, m.Content)
			}
		}
	}
	return out, nil
}

// ratedReplies is the feedback history of model's chats: each rated reply
// with the user message it answered and the latest feedback on it.
func (w *Workspace) ratedReplies(ctx context.Context, model string) ([]tao.Rated, error) {
	chats, err := w.Store.Chats(ctx)
	if err != nil {
		return nil, err
	}
	var out []tao.Rated
	for _, c := range chats {
		if c.Model != model {
			continue
		}
		msgs, err := w.Store.Messages(ctx, c.ID)
		if err != nil {
			return nil, err
		}
		prompt := ""
		for _, m := range msgs {
			switch m.Role {
			case "user":
				prompt = m.Content
			case "assistant":
				fs, err := w.Store.Feedback(ctx, m.ID)
				if err != nil {
					return nil, err
				}
				if len(fs) > 0 && prompt != "" {
					f := fs[len(fs)-1]
					out = append(out, tao.Rated{Prompt: prompt, Answer: m.Content, Thumb: f.Thumb, Correction: f.Correction})
				}
			}
		}
	}
	return out, nil
}

// UndoTAO takes back the adapter version a kept TAO round made: the version
// before it becomes the model's latest again, as a new version (the store
// keeps every version; the history only grows). When the round trained a
// fresh adapter over none, the new version is that adapter with lora_b zero,
// which computes exactly what the bare model does. Only the latest version
// can be undone this way; the event is marked undone.
func (w *Workspace) UndoTAO(ctx context.Context, eventID int64) (store.Adapter, error) {
	ev, err := w.Store.AdaptationEvent(ctx, eventID)
	if err != nil {
		return store.Adapter{}, err
	}
	switch {
	case ev.Method != store.MethodTAO:
		return store.Adapter{}, fmt.Errorf("event %d is a %s event, not a TAO round", eventID, ev.Method)
	case ev.Undone:
		return store.Adapter{}, fmt.Errorf("TAO round %d is already undone", eventID)
	case ev.VersionAfter == ev.VersionBefore:
		return store.Adapter{}, fmt.Errorf("TAO round %d kept no adapter; there is nothing to undo", eventID)
	}
	latest, err := w.Store.LatestAdapter(ctx, ev.Model)
	if err != nil {
		return store.Adapter{}, err
	}
	if latest.Version != ev.VersionAfter {
		return store.Adapter{}, fmt.Errorf("adapter version %d of %s came after TAO round %d (version %d); undo that first", latest.Version, ev.Model, eventID, ev.VersionAfter)
	}
	began := time.Now()
	path := ""
	if ev.VersionBefore > 0 {
		prev, err := w.Store.AdapterVersion(ctx, ev.Model, ev.VersionBefore)
		if err != nil {
			return store.Adapter{}, err
		}
		path = prev.Path
	} else {
		path = latest.Path + "-undone"
		if err := writeZeroAdapter(latest.Path, path, w.Backend); err != nil {
			return store.Adapter{}, err
		}
	}
	a, err := w.Store.AddAdapter(ctx, store.Adapter{Model: ev.Model, Name: "TAO undone", Path: path, ParentVersion: ev.VersionAfter})
	if err != nil {
		return store.Adapter{}, err
	}
	if err := w.Store.MarkUndone(ctx, eventID, true); err != nil {
		return a, err
	}
	detail, _ := json.Marshal(map[string]any{"undo": eventID, "restored_version": ev.VersionBefore})
	_, err = w.Store.AddAdaptationEvent(ctx, store.AdaptationEvent{Model: ev.Model, Method: store.MethodTAO,
		MS: float64(time.Since(began)) / float64(time.Millisecond), VersionBefore: ev.VersionAfter, VersionAfter: a.Version, Detail: detail})
	return a, err
}

// writeZeroAdapter copies the adapter folder src to dst with every lora_b
// zero: the same shapes, no change to what the model computes.
func writeZeroAdapter(src, dst string, b mx.Backend) error {
	raw, err := capped.ReadFile(filepath.Join(src, lora.ConfigFile), 1<<20)
	if err != nil {
		return err
	}
	var ac inference.AdapterConfig
	if err := json.Unmarshal(raw, &ac); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(src, lora.ConfigFile), err)
	}
	ps, _, err := mx.LoadSafetensors(b, filepath.Join(src, lora.AdaptersFile))
	if err != nil {
		return err
	}
	for n, p := range ps {
		if strings.HasSuffix(n, ".lora_b") {
			ps[n] = mx.ZerosLike(p)
		}
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return lora.SaveArrays(dst, ps, &ac)
}
