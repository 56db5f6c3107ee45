package tao

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
	"github.com/inloop/inloop/training/trainer"
)

// exampleCount is how many held-out examples a Result keeps.
const exampleCount = 3

// Round runs one round of TAO over prompts (see the package comment) on m,
// whose tokenizer, chat template and stops rep holds (rep.Model is not used).
// It installs the trained adapter on m only when the held-out check improves.
//
// onEvent, when not nil, gets EventInfo lines as the round moves on, an
// EventTrain after every step and an EventDone, on the calling goroutine.
// ctx is checked between candidates and steps; a cancelled or failed round
// leaves m as it was and returns the Result so far with the error.
func Round(ctx context.Context, m *inference.Model, rep *inference.Replier, prompts []string, reward Reward, opts Options, onEvent func(trainer.Event)) (res Result, err error) {
	began := time.Now()
	defer func() { res.TotalMS = ms(time.Since(began)) }()
	emit := func(ev trainer.Event) {
		if onEvent != nil {
			ev.Elapsed = time.Since(began)
			onEvent(ev)
		}
	}
	info := func(format string, args ...any) {
		emit(trainer.Event{Kind: trainer.EventInfo, Message: fmt.Sprintf(format, args...)})
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return res, err
	}
	if reward == nil || rep == nil || rep.Template == nil {
		return res, errors.New("tao: a round needs a reward and a replier with a chat template")
	}
	res.Reward = reward.Name()
	train, heldout, err := split(prompts, opts.Heldout, opts.Seed)
	if err != nil {
		return res, err
	}
	res.TrainPrompts, res.HeldoutPrompts = len(train), len(heldout)
	res.Before = m.AdapterSnapshot()
	res.VersionBefore, res.VersionAfter = res.Before.Version, res.Before.Version
	g := newGenerator(rep, opts.MaxTokens)

	// The fork carries the adapter being trained; m is not touched until the
	// check has passed.
	work := m.Fork()
	res.Fresh = opts.NewAdapter || work.TopAdapter() == nil
	if res.Fresh {
		cfg := opts.LoRA
		cfg.Name = "tao"
		if _, err := lora.Apply(work, cfg); err != nil {
			return res, fmt.Errorf("tao: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("tao: stopped before the round: %w", err)
	}

	info("TAO: %d training and %d held-out prompts, %d candidates each, reward %s", len(train), len(heldout), opts.Candidates, res.Reward)
	t0 := time.Now()
	before, beforeAnswers, err := evaluate(ctx, work, g, heldout, reward, opts)
	res.CheckMS += ms(time.Since(t0))
	if err != nil {
		return res, err
	}
	info("held-out reward before: %.3f", mean2(before))

	// Candidates, scored.
	cands := make([][]Candidate, len(train))
	for p, prompt := range train {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("tao: stopped after %d of %d prompts' candidates: %w", p, len(train), err)
		}
		if cands[p], err = candidates(ctx, work, g, p, prompt, opts); err != nil {
			return res, err
		}
		items := make([]Item, len(cands[p]))
		for i, c := range cands[p] {
			res.GenerateMS += c.MS
			items[i] = Item{Prompt: prompt, Answer: c.Text, Finished: c.Finished}
		}
		res.Candidates += len(items)
		t := time.Now()
		scores, err := score(ctx, reward, items)
		res.ScoreMS += ms(time.Since(t))
		if err != nil {
			return res, err
		}
		for i := range cands[p] {
			cands[p][i].Reward = scores[i]
			res.MeanReward += scores[i]
		}
		if (p+1)%max(1, len(train)/10) == 0 || p+1 == len(train) {
			info("candidates for %d of %d prompts", p+1, len(train))
		}
	}
	res.MeanReward /= float64(max(res.Candidates, 1))

	// Best and worst of each prompt.
	var pairs []pair
	for p, cs := range cands {
		best, worst := 0, 0
		for i, c := range cs {
			if c.Reward > cs[best].Reward {
				best = i
			}
			if c.Reward < cs[worst].Reward {
				worst = i
			}
		}
		if cs[best].Reward-cs[worst].Reward < max(opts.MinSpread, 1e-12) || len(cs[best].Tokens) == 0 {
			continue
		}
		ids, err := g.prompt(opts.System, train[p])
		if err != nil {
			return res, err
		}
		pairs = append(pairs, pair{
			chosen:   sequence{ids: slices.Concat(ids, cs[best].Tokens), start: len(ids)},
			rejected: sequence{ids: slices.Concat(ids, cs[worst].Tokens), start: len(ids)},
		})
		res.BestReward += cs[best].Reward
	}
	res.Trained = len(pairs)
	if len(pairs) == 0 {
		res.Reason = fmt.Sprintf("the reward does not tell the candidates apart: on no prompt did the best and worst of %d candidates differ by %g or more, so there is nothing to learn; the adapter is unchanged", opts.Candidates, opts.MinSpread)
		info("%s", res.Reason)
		emit(trainer.Event{Kind: trainer.EventDone})
		return res, nil
	}
	res.BestReward /= float64(len(pairs))
	info("training on the best of %d candidates for %d prompts (mean reward %.3f, best %.3f)", opts.Candidates, len(pairs), res.MeanReward, res.BestReward)

	t0 = time.Now()
	err = trainPairs(ctx, work, pairs, opts, &res, emit)
	res.TrainMS = ms(time.Since(t0))
	if err != nil {
		return res, err
	}
	res.Adapter = work.TopAdapter()

	t0 = time.Now()
	after, afterAnswers, err := evaluate(ctx, work, g, heldout, reward, opts)
	res.CheckMS += ms(time.Since(t0))
	if err != nil {
		return res, err
	}
	for p := range min(exampleCount, len(heldout)) {
		res.Examples = append(res.Examples, Example{Prompt: heldout[p], Before: beforeAnswers[p], RewardBefore: before[p][0],
			After: afterAnswers[p], RewardAfter: after[p][0]})
	}
	res.Check = compare(before, after, opts.MinGain, opts.Z)
	if !res.Check.Improved {
		res.Reason = res.Check.Reason + "; the adapter is unchanged"
		info("%s", res.Reason)
		emit(trainer.Event{Kind: trainer.EventDone})
		return res, nil
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("tao: stopped before installing the adapter: %w", err)
	}
	if v := m.AdapterVersion(); v != res.VersionBefore {
		return res, fmt.Errorf("tao: the model's adapters changed while the round ran (version %d, was %d); the trained adapter is not installed", v, res.VersionBefore)
	}
	if res.Fresh {
		res.VersionAfter, err = m.PushAdapter(res.Adapter)
	} else {
		res.VersionAfter, err = m.ReplaceAdapter(res.Adapter)
	}
	if err != nil {
		return res, fmt.Errorf("tao: install: %w", err)
	}
	res.Kept = true
	res.Reason = res.Check.Reason + "; the new adapter is kept"
	info("%s", res.Reason)
	emit(trainer.Event{Kind: trainer.EventDone, Step: len(res.Steps), Iters: len(res.Steps)})
	return res, nil
}

// trainPairs takes the training steps: Epochs passes over the pairs in a
// seeded order, BatchSize pairs a step.
func trainPairs(ctx context.Context, work *inference.Model, pairs []pair, opts Options, res *Result, emit func(trainer.Event)) error {
	pad := padToken(work)
	if opts.Preference > 0 {
		// The reference is the adapter as it was before training.
		seqs := make([]sequence, 0, 2*len(pairs))
		for _, p := range pairs {
			seqs = append(seqs, p.chosen, p.rejected)
		}
		lp, err := logProbs(work, seqs, pad, 2*opts.BatchSize)
		if err != nil {
			return err
		}
		for i := range pairs {
			pairs[i].refChosen, pairs[i].refRejected = lp[2*i], lp[2*i+1]
		}
	}
	o := optim.NewAdam(optim.Constant(float32(opts.LearningRate)))
	o.BiasCorrection = true
	st := trainer.Stepper{Bind: trainer.Adapters(work), Optimizer: o, ClipNorm: clipNorm}
	params := lora.Params(work)
	rng := rand.New(rand.NewPCG(opts.Seed, 0x7a0))
	perEpoch := (len(pairs) + opts.BatchSize - 1) / opts.BatchSize
	total := opts.Epochs * perEpoch
	var tokens int64
	loop := time.Now()
	for e := range opts.Epochs {
		order := rng.Perm(len(pairs))
		for b := range perEpoch {
			step := e*perEpoch + b
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("tao: stopped after step %d of %d: %w", step, total, err)
			}
			var batch []pair
			for _, i := range order[b*opts.BatchSize : min((b+1)*opts.BatchSize, len(pairs))] {
				batch = append(batch, pairs[i])
			}
			t := time.Now()
			sr, err := st.Step(ctx, params, []trainer.Batch{lossBatch(batch, opts.Preference, opts.Beta, pad)})
			d := time.Since(t)
			if err != nil {
				return fmt.Errorf("tao: step %d: %w", step+1, err)
			}
			params = sr.Params
			tokens += sr.Tokens
			res.Steps = append(res.Steps, Step{Loss: sr.Loss, MS: ms(d)})
			el := time.Since(loop)
			_, peak, _ := mx.Memory(work.Backend())
			emit(trainer.Event{Kind: trainer.EventTrain, Step: step + 1, Iters: total, Loss: sr.Loss, LR: sr.LR, Tokens: tokens,
				TokensPerSec: float64(sr.Tokens) / max(d.Seconds(), 1e-9), PeakMemory: peak,
				ETA: time.Duration(float64(el) / float64(step+1) * float64(total-step-1))})
		}
	}
	return nil
}

// candidates generates a training prompt's candidates: candidate i under
// system prompt i mod |Systems| and sampling i mod |Sampling|, with its own
// seed. Candidates under one system prompt share a session, so the prompt is
// computed once for them.
func candidates(ctx context.Context, work *inference.Model, g *generator, p int, prompt string, opts Options) ([]Candidate, error) {
	sessions := map[string]*inference.Session{}
	prompts := map[string][]int{}
	out := make([]Candidate, opts.Candidates)
	for i := range out {
		sys := opts.Systems[i%len(opts.Systems)]
		if sessions[sys] == nil {
			ids, err := g.prompt(sys, prompt)
			if err != nil {
				return nil, err
			}
			sessions[sys], prompts[sys] = inference.NewSession(work), ids
		}
		samp := opts.Sampling[i%len(opts.Sampling)]
		samp.Seed = seedOf(opts.Seed, "candidate", p, i)
		c, err := g.generate(ctx, sessions[sys], prompts[sys], samp)
		if err != nil {
			return nil, err
		}
		c.Prompt, c.System = p, sys
		out[i] = c
	}
	return out, nil
}

// evaluate answers every held-out prompt EvalSamples times as the chat would
// (System, EvalSampling, seeds that depend only on the prompt and the sample)
// and scores the answers; it returns the scores by prompt and sample, and each
// prompt's first answer.
func evaluate(ctx context.Context, work *inference.Model, g *generator, heldout []string, reward Reward, opts Options) ([][]float64, []string, error) {
	var items []Item
	for p, prompt := range heldout {
		ids, err := g.prompt(opts.System, prompt)
		if err != nil {
			return nil, nil, err
		}
		sess := inference.NewSession(work)
		for j := range opts.EvalSamples {
			if err := ctx.Err(); err != nil {
				return nil, nil, fmt.Errorf("tao: stopped in the held-out check: %w", err)
			}
			samp := *opts.EvalSampling
			samp.Seed = seedOf(opts.Seed, "heldout", p, j)
			c, err := g.generate(ctx, sess, ids, samp)
			if err != nil {
				return nil, nil, err
			}
			items = append(items, Item{Prompt: prompt, Answer: c.Text, Finished: c.Finished})
		}
	}
	scores, err := score(ctx, reward, items)
	if err != nil {
		return nil, nil, err
	}
	out := make([][]float64, len(heldout))
	first := make([]string, len(heldout))
	for p := range out {
		out[p] = scores[p*opts.EvalSamples : (p+1)*opts.EvalSamples]
		first[p] = items[p*opts.EvalSamples].Answer
	}
	return out, first, nil
}

// score runs the reward and holds it to its contract.
func score(ctx context.Context, reward Reward, items []Item) ([]float64, error) {
	s, err := reward.Score(ctx, items)
	if err != nil {
		return nil, fmt.Errorf("tao: reward %s: %w", reward.Name(), err)
	}
	if err := checkScores(reward.Name(), s, len(items)); err != nil {
		return nil, err
	}
	return s, nil
}

// split removes blank and repeated prompts and holds out a seeded share
// (at least one), keeping at least one to train on.
func split(prompts []string, share float64, seed uint64) (train, heldout []string, err error) {
	seen := map[string]bool{}
	var uniq []string
	for _, p := range prompts {
		p = strings.TrimSpace(p)
		if p != "" && !seen[p] {
			seen[p] = true
			uniq = append(uniq, p)
		}
	}
	if len(uniq) < 2 {
		return nil, nil, fmt.Errorf("%w (got %d)", ErrTooFewPrompts, len(uniq))
	}
	rng := rand.New(rand.NewPCG(seed, 0x5e1d))
	rng.Shuffle(len(uniq), func(i, j int) { uniq[i], uniq[j] = uniq[j], uniq[i] })
	n := min(max(1, int(math.Round(share*float64(len(uniq))))), len(uniq)-1)
	return uniq[n:], uniq[:n], nil
}

// seedOf derives a sampling seed from the round's seed and a position.
func seedOf(seed uint64, what string, p, i int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d/%d", seed, what, p, i)
	return h.Sum64()
}

// padToken fills the batch past a sequence's end; its positions are masked.
func padToken(m *inference.Model) int {
	cfg := m.Config()
	if ids := cfg.StopTokens(); len(ids) > 0 {
		return ids[0]
	}
	return 0
}

// adapterLoRAs copies an adapter's LoRA updates, to give it another name.

func mean2(x [][]float64) float64 {
	var s, n float64
	for _, r := range x {
		for _, v := range r {
			s += v
			n++
		}
	}
	return s / max(n, 1)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
