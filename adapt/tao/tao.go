// Package tao is test-time adaptive optimization (after Databricks' TAO,
// 2025): the model improves on the prompts people actually send it, with no
// labels. One Round
//
//  1. splits the prompts (the user's messages from their chats, or a prompt
//     file) into training and held-out prompts;
//  2. answers every held-out prompt a few times as the chat would (its
//     system prompt, its sampling, fixed seeds) and scores the answers with a
//     local reward: the "before";
//  3. generates n candidates for every training prompt, varying the sampling
//     (temperature, top-p, top-k, repetition penalty) and the system prompt,
//     so the candidates differ in more than their seeds, and scores them;
//  4. trains the adapter on each prompt's best candidate — best-of-n
//     fine-tuning on the prompt as the chat sends it, without the system
//     prompt that produced the answer, so what the instruction brought out
//     becomes the model's own — optionally with a preference loss (DPO)
//     between the best and the worst (lossBatch);
//  5. answers the held-out prompts again with the same seeds and scores them:
//     the "after". Only when the reward rose by more than a floor and by more
//     than its noise (Check) is the trained adapter installed on the model;
//     otherwise the model's adapters are not touched and Result.Reason says
//     why.
//
// The reward is the caller's (Reward): Combined documents the usual one — a
// decision-model judge trained on the thumbs history (Judge, TrainJudge), the
// history itself (History) and the simple checks (Checks) — and Format is a
// known one for tasks with a checkable format. A reward that cannot tell the
// candidates of any prompt apart (a constant) stops the round before
// training.
//
// Round trains on a fork of the model (its frozen weights shared, its
// adapters its own), so a chat answering from the model meanwhile never sees
// a half-trained adapter, and a round that is cancelled, fails or does not
// improve leaves the model exactly as it was. A kept round is one adapter
// change: m.RestoreAdapter(Result.Before) undoes it bit for bit.
package tao

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/training/lora"
)

// Defaults of Options, chosen on the bundled demo model (see the package's
// tests and the note).
const (
	DefaultCandidates  = 4
	DefaultMaxTokens   = 48
	DefaultHeldout     = 0.25
	DefaultEvalSamples = 4
	DefaultEpochs      = 3
	DefaultBatchSize   = 4
	// DefaultLearningRate is Adam's (constant, bias-corrected) on the adapter.
	DefaultLearningRate = 5e-4
	DefaultBeta         = 0.1
	// DefaultMinGain is the least held-out gain worth a new adapter version.
	DefaultMinGain = 0.01
	// DefaultZ is how many standard errors the gain must clear.
	DefaultZ = 2.0
	// DefaultMinSpread: a prompt whose best and worst candidates score closer
	// than this teaches nothing and is not trained on.
	DefaultMinSpread = 0.05
	clipNorm         = 1.0
)

// DefaultSystems are the system prompts candidates are generated under, in
// turn ("" is none: the prompt as sent).
var DefaultSystems = []string{
	"",
	"Answer briefly.",
	"Answer in one clear sentence.",
	"You are a careful assistant. Be precise and do not repeat yourself.",
}

// DefaultSampling are the sampling settings candidates are generated with, in
// turn; each candidate also gets its own seed.
var DefaultSampling = []inference.SampleOptions{
	{Temperature: 0.7, TopP: 0.95},
	{Temperature: 1.0},
	{Temperature: 0.5, TopK: 40},
	{Temperature: 0.9, TopP: 0.9, RepetitionPenalty: 1.2, RepetitionWindow: 64},
}

// DefaultEvalSampling is how the held-out check answers: the chat's default.
var DefaultEvalSampling = inference.SampleOptions{Temperature: 0.7, TopP: 0.95}

// ErrTooFewPrompts reports fewer than two distinct prompts: a round needs one
// to train on and one to check on.
var ErrTooFewPrompts = errors.New("tao: a round needs at least two distinct prompts")

// Options steer a Round. The zero value takes the defaults.
type Options struct {
	Candidates int                       // per training prompt (DefaultCandidates)
	Systems    []string                  // system prompts candidates are generated under, in turn (DefaultSystems)
	Sampling   []inference.SampleOptions // sampling settings candidates use, in turn (DefaultSampling)
	// System is the system prompt the chat sends ("" none): training prompts
	// and the held-out check are rendered with it.
	System    string
	MaxTokens int // longest answer (DefaultMaxTokens)

	Heldout      float64 // share of the prompts held out for the check (DefaultHeldout; at least one)
	EvalSamples  int     // answers per held-out prompt, before and after (DefaultEvalSamples)
	EvalSampling *inference.SampleOptions
	MinGain      float64 // DefaultMinGain; -1 for none
	Z            float64 // DefaultZ; -1 for none
	MinSpread    float64 // DefaultMinSpread; -1 for none (every prompt trains)

	Epochs       int     // passes over the best candidates (DefaultEpochs)
	BatchSize    int     // prompts per step (DefaultBatchSize)
	LearningRate float64 // DefaultLearningRate
	// Preference is λ, the weight of the DPO loss between each prompt's best
	// and worst candidates (0: best-of-n fine-tuning alone); Beta is DPO's β
	// (DefaultBeta).
	Preference float64
	Beta       float64
	// LoRA shapes the adapter trained when the model has none (or with
	// NewAdapter): lora's defaults (rank 8, scale 20, the last 16 blocks).
	LoRA lora.Config
	// NewAdapter trains a fresh adapter pushed over the model's instead of
	// the model's top adapter.
	NewAdapter bool
	Seed       uint64
}

func (o Options) withDefaults() Options {
	if o.Candidates == 0 {
		o.Candidates = DefaultCandidates
	}
	if len(o.Systems) == 0 {
		o.Systems = DefaultSystems
	}
	if len(o.Sampling) == 0 {
		o.Sampling = DefaultSampling
	}
	if o.MaxTokens == 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	if o.Heldout == 0 {
		o.Heldout = DefaultHeldout
	}
	if o.EvalSamples == 0 {
		o.EvalSamples = DefaultEvalSamples
	}
	if o.EvalSampling == nil {
		s := DefaultEvalSampling
		o.EvalSampling = &s
	}
	o.MinGain = orDefault(o.MinGain, DefaultMinGain)
	o.Z = orDefault(o.Z, DefaultZ)
	o.MinSpread = orDefault(o.MinSpread, DefaultMinSpread)
	if o.Epochs == 0 {
		o.Epochs = DefaultEpochs
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.LearningRate == 0 {
		o.LearningRate = DefaultLearningRate
	}
	if o.Beta == 0 {
		o.Beta = DefaultBeta
	}
	return o
}

// orDefault: 0 takes def, −1 is 0 (off).
func orDefault(v, def float64) float64 {
	switch v {
	case 0:
		return def
	case -1:
		return 0
	}
	return v
}

func (o Options) validate() error {
	switch {
	case o.Candidates < 2:
		return fmt.Errorf("tao: %d candidates per prompt; best-of-n needs at least 2", o.Candidates)
	case o.MaxTokens < 1:
		return fmt.Errorf("tao: max tokens %d", o.MaxTokens)
	case !(o.Heldout > 0 && o.Heldout < 1):
		return fmt.Errorf("tao: held-out share %g is not between 0 and 1", o.Heldout)
	case o.EvalSamples < 1 || o.Epochs < 1 || o.BatchSize < 1:
		return fmt.Errorf("tao: eval samples %d, epochs %d and batch size %d must be at least 1", o.EvalSamples, o.Epochs, o.BatchSize)
	case !(o.MinGain >= 0) || !(o.Z >= 0) || !(o.MinSpread >= 0) || math.IsInf(o.MinGain+o.Z+o.MinSpread, 0):
		return fmt.Errorf("tao: min gain %g, z %g and min spread %g must not be negative", o.MinGain, o.Z, o.MinSpread)
	case !(o.LearningRate > 0) || math.IsInf(o.LearningRate, 0):
		return fmt.Errorf("tao: learning rate %g", o.LearningRate)
	case !(o.Preference >= 0) || math.IsInf(o.Preference, 0) || !(o.Beta > 0) || math.IsInf(o.Beta, 0):
		return fmt.Errorf("tao: preference weight %g and beta %g", o.Preference, o.Beta)
	}
	for _, s := range append(slices.Clone(o.Sampling), *o.EvalSampling) {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("tao: %w", err)
		}
	}
	return o.LoRA.Validate()
}

// Step is one training step as the report keeps it.
type Step struct {
	Loss float64 `json:"loss"` // the step's loss before the update
	MS   float64 `json:"ms"`   // forward, backward and update
}

// Result is what a Round did.
type Result struct {
	// Kept: the trained adapter is installed on the model. Reason says why it
	// was or was not, in a sentence.
	Kept   bool   `json:"kept"`
	Reason string `json:"reason"`
	Check  Check  `json:"check"` // the held-out reward before and after; zero when the round stopped before training

	Reward         string  `json:"reward"` // the reward's name
	TrainPrompts   int     `json:"train_prompts"`
	HeldoutPrompts int     `json:"heldout_prompts"`
	Candidates     int     `json:"candidates"`  // generated for training
	Trained        int     `json:"trained"`     // prompts whose best candidate was trained on
	MeanReward     float64 `json:"mean_reward"` // over every training candidate
	BestReward     float64 `json:"best_reward"` // mean of each trained prompt's best
	Steps          []Step  `json:"steps"`

	// Times in ms: all candidates' generation, their scoring, the training
	// steps, the two held-out passes (generation and scoring), the round.
	GenerateMS float64 `json:"generate_ms"`
	ScoreMS    float64 `json:"score_ms"`
	TrainMS    float64 `json:"train_ms"`
	CheckMS    float64 `json:"check_ms"`
	TotalMS    float64 `json:"total_ms"`

	// VersionBefore and VersionAfter are the model's adapter versions (equal
	// when nothing was kept); Before is its adapter state before the round:
	// m.RestoreAdapter(Before) undoes a kept round.
	VersionBefore uint64                 `json:"version_before"`
	VersionAfter  uint64                 `json:"version_after"`
	Before        inference.AdapterState `json:"-"`
	// Adapter is the trained adapter, installed when Kept (nil when the round
	// stopped before training); Fresh says it was a new adapter pushed over
	// the model's rather than the model's own top adapter trained further.
	Adapter *inference.Adapter `json:"-"`
	Fresh   bool               `json:"fresh"`

	// Examples are a few held-out answers before and after, for the report.
	Examples []Example `json:"examples,omitempty"`
}

// Example is one held-out prompt's first answer before and after training.
type Example struct {
	Prompt       string  `json:"prompt"`
	Before       string  `json:"before"`
	RewardBefore float64 `json:"reward_before"`
	After        string  `json:"after"`
	RewardAfter  float64 `json:"reward_after"`
}

// PerCandidateMS is the mean generation time of one training candidate.
func (r Result) PerCandidateMS() float64 { return r.GenerateMS / math.Max(float64(r.Candidates), 1) }

// ScorePerCandidateMS is the mean scoring time of one training candidate.
func (r Result) ScorePerCandidateMS() float64 { return r.ScoreMS / math.Max(float64(r.Candidates), 1) }
