package inference

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// withQueue runs f with Generate's queued loop on the cpu backend too.
func withQueue(t *testing.T, f func(t *testing.T)) {
	queueMode = 1
	defer func() { queueMode = 0 }()
	f(t)
}

// The queued loop passes the plain loop's tests: greedy tokens equal full
// forwards', every stop, a second turn's reuse, log-probabilities, and
// adapters changing while replies stream.
func TestGenerateQueued(t *testing.T) {
	runWith(t, withQueue, map[string]func(*testing.T){
		"greedy":         TestGenerateGreedyMatchesArgmax,
		"stops":          TestGenerateStops,
		"second turn":    TestGenerateSecondTurnReuses,
		"log prob":       TestGenerateLogProb,
		"adapter change": TestGenerateWhileAdaptersChange,
	})
}

// runWith runs other tests of the package as subtests, each inside with (a
// mode switched on for its duration).
func runWith(t *testing.T, with func(*testing.T, func(*testing.T)), tests map[string]func(*testing.T)) {
	for name, f := range tests {
		t.Run(name, func(t *testing.T) { with(t, f) })
	}
}

// Queued and plain loops give the same tokens, stats and session, stop for
// stop, with every sampling filter the device draws with; an adapter changed
// from emit takes effect at the next token in both.
func TestGenerateQueuedMatchesPlain(t *testing.T) {
	b := cpu(t)
	cfg := tinyConfig("qwen3")
	cfg.MaxPositionEmbeddings = 40
	m := NewRandom(cfg, 31, b)
	prompt := tokenSeq(9, cfg.VocabSize, 2)
	type run struct {
		toks   []int
		st     Stats
		tokens []int
		cached int
		err    error
	}
	do := func(o GenerateOptions, emitStop func(i, tok int) bool, queued bool) run {
		queueMode = map[bool]int{true: 1}[queued]
		defer func() { queueMode = 0 }()
		s := NewSession(m)
		var r run
		r.st, r.err = Generate(context.Background(), s, prompt, o, func(tok int) bool {
			r.toks = append(r.toks, tok)
			return emitStop(len(r.toks), tok)
		})
		r.tokens, r.cached = s.Tokens(), s.Cache().Len()
		return r
	}
	never := func(int, int) bool { return false }
	samplings := []SampleOptions{{}, {Temperature: 0.9, TopK: 20, TopP: 0.9, MinP: 0.01, Seed: 4}}
	for _, so := range samplings {
		// A stop token: the plain run's 6th token.
		ref := do(GenerateOptions{MaxTokens: 10, Sampling: so}, never, false)
		cases := []struct {
			name string
			o    GenerateOptions
			stop func(i, tok int) bool
		}{
			{"max tokens", GenerateOptions{MaxTokens: 10, Sampling: so, LogProb: true}, never},
			{"stop token", GenerateOptions{StopTokens: []int{ref.toks[5]}, Sampling: so}, never},
			{"emit", GenerateOptions{Sampling: so}, func(i, _ int) bool { return i == 7 }},
			{"context", GenerateOptions{Sampling: so}, never},
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/T=%g", c.name, so.Temperature), func(t *testing.T) {
				p, q := do(c.o, c.stop, false), do(c.o, c.stop, true)
				if p.err != nil || q.err != nil {
					t.Fatalf("errors: plain %v, queued %v", p.err, q.err)
				}
				if !slices.Equal(p.toks, q.toks) || p.st.StopReason != q.st.StopReason || p.st.GeneratedTokens != q.st.GeneratedTokens {
					t.Fatalf("plain %v (%s), queued %v (%s)", p.toks, p.st.StopReason, q.toks, q.st.StopReason)
				}
				if !slices.Equal(p.tokens, q.tokens) || p.cached != q.cached || p.cached != len(p.tokens) || p.st.KVBytes != q.st.KVBytes {
					t.Errorf("sessions: plain holds %d tokens (%d cached, %d bytes), queued %d (%d cached, %d bytes)",
						len(p.tokens), p.cached, p.st.KVBytes, len(q.tokens), q.cached, q.st.KVBytes)
				}
				if math.Abs(p.st.LogProb-q.st.LogProb) > 1e-4*max(1, math.Abs(p.st.LogProb)) {
					t.Errorf("log prob: plain %v, queued %v", p.st.LogProb, q.st.LogProb)
				}
				if q.st.DecodeTPS <= 0 && q.st.GeneratedTokens > 1 {
					t.Errorf("queued stats lack the decode rate: %+v", q.st)
				}
			})
		}
	}

	// An adapter pushed from emit after the 3rd token: both loops compute
	// the 4th token on with it, and draw the same tokens.
	t.Run("adapter pushed from emit", func(t *testing.T) {
		for _, so := range samplings {
			var got [3][]int // plain, queued, and plain without the push
			for i, queued := range []bool{false, true, false} {
				mm := NewRandom(cfg, 31, b)
				a := randomAdapter(t, mm, "a", 5, 30)
				queueMode = map[bool]int{true: 1}[queued]
				s := NewSession(mm)
				_, err := Generate(context.Background(), s, prompt, GenerateOptions{MaxTokens: 8, Sampling: so}, func(tok int) bool {
					got[i] = append(got[i], tok)
					if len(got[i]) == 3 && i < 2 {
						if _, err := mm.PushAdapter(a); err != nil {
							t.Fatal(err)
						}
					}
					return false
				})
				queueMode = 0
				if err != nil {
					t.Fatal(err)
				}
				if s.AdapterVersion() != mm.AdapterVersion() {
					t.Errorf("queued=%v: session at version %d, model at %d", queued, s.AdapterVersion(), mm.AdapterVersion())
				}
			}
			if !slices.Equal(got[0], got[1]) {
				t.Errorf("T=%g: plain %v, queued %v", so.Temperature, got[0], got[1])
			}
			if slices.Equal(got[0], got[2]) {
				t.Errorf("T=%g: the pushed adapter changed no token (%v): the case tests nothing", so.Temperature, got[0])
			}
		}
	})
}

// lazyBackend stands for MLX in queues' decision: it evaluates
// asynchronously, on the device it names.
type lazyBackend struct {
	mx.Backend
	device string
}

func (lazyBackend) AsyncEval(...*mx.Array) error { return nil }
func (l lazyBackend) Device() string             { return l.device }

func TestQueuesWhere(t *testing.T) {
	cpuB := cpu(t)
	greedy, topP := SampleOptions{}, SampleOptions{Temperature: 0.7, TopP: 0.95}
	cases := []struct {
		b    mx.Backend
		o    SampleOptions
		want bool
	}{
		{cpuB, greedy, false}, // eager: nothing to overlap
		{lazyBackend{cpuB, "gpu"}, greedy, true},
		{lazyBackend{cpuB, "gpu"}, topP, true},
		{lazyBackend{cpuB, "cpu"}, greedy, true},
		{lazyBackend{cpuB, "cpu"}, SampleOptions{Temperature: 0.7, MinP: 0.1}, true},
		{lazyBackend{cpuB, "cpu"}, topP, false}, // the sort costs more than the overlap saves
		{lazyBackend{cpuB, "cpu"}, SampleOptions{Temperature: 0.7, TopK: 40}, false},
		{lazyBackend{cpuB, "gpu"}, SampleOptions{RepetitionPenalty: 1.1}, false}, // needs the tokens on the host
	}
	for i, c := range cases {
		if got := queues(c.b, c.o); got != c.want {
			t.Errorf("case %d (%T %+v): queues = %v, want %v", i, c.b, c.o, got, c.want)
		}
	}
}
