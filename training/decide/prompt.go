package decide

import (
	"fmt"
	"strings"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
)

// PromptVersion numbers the prompt layout below; a saved model records it, and
// a model saved with another layout is refused rather than fed prompts it was
// not trained on.
const PromptVersion = 1

// minStateTokens is the least room a question must leave for the state.
const minStateTokens = 16

// Encoder turns rows into token sequences, one per question, laid out as the
// package comment shows. Everything but the state is tokenized once per question.
type Encoder struct {
	tok      *tokenizer.Tokenizer
	task     *Task
	marker   int
	maxLen   int
	specials []string // special-token texts, removed from states so a row cannot forge a marker
	qs       []questionTokens
}

type questionTokens struct {
	head    []int // BOS, instructions, the options listed, the state label
	tail    []int // "\n\n" + prompt + ":"; its last token is the query position
	options []int // " option" <marker> for each option
	markers []int // offsets of the markers in options
	first   []int // each option's first token: what restricted decoding compares
}

// NewEncoder prepares the prompts of task t for tokenizer tok. marker is the
// token that closes each option (a special token such as end-of-text); maxLen
// caps a sequence, and a state that does not fit is cut at its end.
func NewEncoder(tok *tokenizer.Tokenizer, t *Task, marker, maxLen int) (*Encoder, error) {
	if marker < 0 || marker >= tok.VocabSize() {
		return nil, fmt.Errorf("decide: marker token %d outside the vocabulary (%d)", marker, tok.VocabSize())
	}
	e := &Encoder{tok: tok, task: t, marker: marker, maxLen: maxLen}
	for id := range tok.VocabSize() {
		if tok.IsSpecial(id) {
			if s, ok := tok.Token(id); ok && s != "" {
				e.specials = append(e.specials, s)
			}
		}
	}
	for _, q := range t.Questions {
		qt, err := e.question(&q)
		if err != nil {
			return nil, err
		}
		e.qs = append(e.qs, qt)
	}
	return e, nil
}

// DefaultMarker is the token that closes each option: the model's first
// end-of-sequence token (the tokenizer's, else the config's), a special token
// that text cannot produce.
func DefaultMarker(tok *tokenizer.Tokenizer, cfg inference.Config) (int, error) {
	if eos := tok.EOS(); len(eos) > 0 {
		return eos[0], nil
	}
	if len(cfg.EOSTokenID) > 0 {
		return cfg.EOSTokenID[0], nil
	}
	return 0, fmt.Errorf("decide: neither the tokenizer nor the config names an end-of-sequence token to close options with")
}

func (e *Encoder) encode(s string) ([]int, error) {
	ids, err := e.tok.Encode(s, false)
	if err != nil {
		return nil, fmt.Errorf("decide: %w", err)
	}
	return ids, nil
}

func (e *Encoder) question(q *Question) (questionTokens, error) {
	var b strings.Builder
	if e.task.Instruction != "" {
		b.WriteString(strings.TrimSpace(e.task.Instruction))
		b.WriteString("\n\n")
	}
	b.WriteString(strings.TrimSpace(q.Instruction))
	b.WriteString("\nOptions:\n")
	for _, o := range q.Options {
		b.WriteString("- ")
		b.WriteString(o.Name)
		if o.Description != "" {
			b.WriteString(": ")
			b.WriteString(strings.TrimSpace(o.Description))
		}
		b.WriteByte('\n')
	}
	b.WriteString("\n")
	b.WriteString(e.task.StateLabel)
	b.WriteString(":\n")
	var qt questionTokens
	head, err := e.tok.Encode(e.clean(b.String()), true) // BOS where the model wants one
	if err != nil {
		return qt, fmt.Errorf("decide: %w", err)
	}
	if eos := e.tok.EOS(); len(eos) > 0 && len(head) > 0 && head[len(head)-1] == eos[0] {
		head = head[:len(head)-1] // a tokenizer that appends EOS must not end the prompt
	}
	qt.head = head
	if qt.tail, err = e.encode("\n\n" + e.clean(q.Prompt) + ":"); err != nil {
		return qt, err
	}
	for _, o := range q.Options {
		ids, err := e.encode(" " + e.clean(o.Name))
		if err != nil {
			return qt, err
		}
		if len(ids) == 0 {
			return qt, fmt.Errorf("%w: question %q: option %q has no tokens", ErrTask, q.Name, o.Name)
		}
		qt.first = append(qt.first, ids[0])
		qt.options = append(qt.options, ids...)
		qt.markers = append(qt.markers, len(qt.options))
		qt.options = append(qt.options, e.marker)
	}
	if room := e.maxLen - len(qt.head) - len(qt.tail) - len(qt.options); room < minStateTokens {
		return qt, fmt.Errorf("%w: question %q takes %d tokens without its state, which leaves %d of the %d a sequence may have (at least %d needed)",
			ErrTask, q.Name, len(qt.head)+len(qt.tail)+len(qt.options), room, e.maxLen, minStateTokens)
	}
	return qt, nil
}

// SharedFirstTokens lists, per question, the options whose first token another
// option also starts with: restricted decoding cannot tell those apart, so the
// untrained model ties them.
func (e *Encoder) SharedFirstTokens() map[string][]string {
	out := map[string][]string{}
	for qi, qt := range e.qs {
		count := map[int]int{}
		for _, f := range qt.first {
			count[f]++
		}
		for k, f := range qt.first {
			if count[f] > 1 {
				name := e.task.Questions[qi].Name
				out[name] = append(out[name], e.task.Questions[qi].Options[k].Name)
			}
		}
	}
	return out
}

// clean removes special-token texts, so text from a row cannot produce a
// marker or any other control token.
func (e *Encoder) clean(s string) string {
	for _, sp := range e.specials {
		if strings.Contains(s, sp) {
			s = strings.ReplaceAll(s, sp, "")
		}
	}
	return s
}

// Sequence is one question of one row as the model reads it.
type Sequence struct {
	Question int   // index into the task's questions
	Tokens   []int // the whole sequence
	Query    int   // position whose hidden state restricted decoding reads
	Markers  []int // position of each option's marker
	// State is the span [State[0], State[1]) of the state's tokens, which the
	// head's pooled term averages over.
	State [2]int
	Cut   bool // the state was cut to fit
}

// StateTokens tokenizes a state once, for all questions of its row.
func (e *Encoder) StateTokens(state string) ([]int, error) { return e.encode(e.clean(state)) }

// Sequence lays out question qi for a state already tokenized.
func (e *Encoder) Sequence(qi int, state []int) Sequence {
	qt := e.qs[qi]
	room := e.maxLen - len(qt.head) - len(qt.tail) - len(qt.options)
	s := Sequence{Question: qi}
	if len(state) > room {
		state, s.Cut = state[:room], true
	}
	s.Tokens = make([]int, 0, len(qt.head)+len(state)+len(qt.tail)+len(qt.options))
	s.State = [2]int{len(qt.head), len(qt.head) + len(state)}
	s.Tokens = append(append(append(s.Tokens, qt.head...), state...), qt.tail...)
	s.Query = len(s.Tokens) - 1
	for _, m := range qt.markers {
		s.Markers = append(s.Markers, len(s.Tokens)+m)
	}
	s.Tokens = append(s.Tokens, qt.options...)
	return s
}

// Prompt returns the tokens up to and including the query position: what
// restricted decoding feeds the model.
func (s Sequence) Prompt() []int { return s.Tokens[:s.Query+1] }

// FirstTokens returns question qi's options' first tokens.
func (e *Encoder) FirstTokens(qi int) []int { return append([]int(nil), e.qs[qi].first...) }

// Marker is the token that closes each option.
func (e *Encoder) Marker() int { return e.marker }

// MaxLen is the longest sequence the encoder makes.
func (e *Encoder) MaxLen() int { return e.maxLen }
