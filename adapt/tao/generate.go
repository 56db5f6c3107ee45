package tao

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/chat"
)

// Candidate is one generated answer to a prompt.
type Candidate struct {
	Prompt   int    // the prompt's index in the round
	System   string // the system prompt it was generated under ("" for none)
	Sampling inference.SampleOptions
	Text     string
	// Tokens are the sampled answer tokens, with the stop token it ended on
	// (so training on it teaches where to stop); Finished says it ended on
	// its own rather than at the token budget.
	Tokens   []int
	Finished bool
	MS       float64 // generation time, prefill included
	Reward   float64
}

// generator writes candidates with a model and a replier's tokenizer,
// template and stops.
type generator struct {
	rep       *inference.Replier
	maxTokens int
	endToken  int // appended to an answer cut at a stop string; -1: none known
}

func newGenerator(rep *inference.Replier, maxTokens int) *generator {
	g := &generator{rep: rep, maxTokens: maxTokens, endToken: -1}
	if rep.Template != nil {
		if eos := rep.Template.EOSTokens(); len(eos) > 0 {
			g.endToken = eos[0]
		}
	}
	if g.endToken < 0 && len(rep.StopTokens) > 0 {
		g.endToken = rep.StopTokens[0]
	}
	return g
}

// prompt renders a user message under a system prompt ("" for none) with the
// chat template, ready for the answer.
func (g *generator) prompt(system, user string) ([]int, error) {
	var msgs []chat.Message
	if system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: system})
	}
	msgs = append(msgs, chat.Message{Role: "user", Content: user})
	ids, err := g.rep.Prompt(msgs, chat.RenderOptions{})
	if err != nil {
		return nil, fmt.Errorf("tao: %w", err)
	}
	return ids, nil
}

// generate samples one answer after ids in sess (which reuses the prefix it
// already holds: candidates of one prompt and system prompt share it).
func (g *generator) generate(ctx context.Context, sess *inference.Session, ids []int, samp inference.SampleOptions) (Candidate, error) {
	t0 := time.Now()
	var toks []int
	var c Candidate
	cut := false // ended at a stop string
	stops := g.rep.StopStrings
	_, err := inference.Generate(ctx, sess, ids, inference.GenerateOptions{MaxTokens: g.maxTokens, Sampling: samp}, func(tok int) bool {
		toks = append(toks, tok)
		if slices.Contains(g.rep.StopTokens, tok) {
			c.Finished = true
			return true
		}
		if len(stops) > 0 {
			text := g.rep.Tokenizer.Decode(toks, true)
			for _, s := range stops {
				if i := strings.Index(text, s); i >= 0 {
					c.Finished, cut = true, true
					c.Text = text[:i]
					return true
				}
			}
		}
		return false
	})
	if err != nil {
		return c, fmt.Errorf("tao: generate: %w", err)
	}
	switch {
	case cut:
		// Cut at a stop string: the text before it, then the end of the turn.
		if c.Tokens, err = g.rep.Tokenizer.Encode(c.Text, false); err != nil {
			return c, fmt.Errorf("tao: %w", err)
		}
		if g.endToken >= 0 {
			c.Tokens = append(c.Tokens, g.endToken)
		}
	case c.Finished:
		c.Tokens = toks
		c.Text = g.rep.Tokenizer.Decode(toks[:len(toks)-1], true)
	default:
		c.Tokens = toks
		c.Text = g.rep.Tokenizer.Decode(toks, true)
	}
	c.Sampling = samp
	c.MS = ms(time.Since(t0))
	return c, nil
}
