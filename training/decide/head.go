package decide

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
)

// The head's weights, per question, by name:
//
//	head.<question>.rows    (K, hidden)  r_k, starting as the output-projection rows of the options' first tokens
//	head.<question>.marker  (hidden)     v, starting at zero
//	head.<question>.pool    (K, hidden)  u_k, starting at zero
//	head.<question>.bias    (K)          b, starting at zero
//
// and two fixed (untrained) vectors that standardize the pooled state, as any
// linear probe standardizes its features: the mean and standard deviation of
// mean(h_state) over training rows under the untrained model,
//
//	head.<question>.pool_mean, head.<question>.pool_scale   (hidden)
//
// Without them the few directions in which tickets differ are small beside the
// part all tickets share, and the head needs thousands of steps to grow weights
// large enough to read them.
const headPrefix = "head."

func headName(question, part string) string { return headPrefix + question + "." + part }

// IsHeadParam reports whether a weight name belongs to the head (the rest are
// adapter weights).
func IsHeadParam(name string) bool { return strings.HasPrefix(name, headPrefix) }

// isFixed reports the head's weights that training does not change.
func isFixed(name string) bool {
	return strings.HasSuffix(name, ".pool_mean") || strings.HasSuffix(name, ".pool_scale")
}

// InitHead returns a fresh head for e's task over m: with it, the scores of an
// untrained model are restricted decoding's logits.
func InitHead(m *inference.Model, e *Encoder) (map[string]*mx.Array, error) {
	b := m.Backend()
	hidden := m.Config().HiddenSize
	head := map[string]*mx.Array{}
	for qi, q := range e.task.Questions {
		rows, err := m.OutputRows(e.FirstTokens(qi))
		if err != nil {
			return nil, fmt.Errorf("decide: head of %q: %w", q.Name, err)
		}
		head[headName(q.Name, "rows")] = rows
		head[headName(q.Name, "marker")] = mx.Full(b, []int{hidden}, 0, mx.Float32)
		head[headName(q.Name, "pool")] = mx.Full(b, []int{len(q.Options), hidden}, 0, mx.Float32)
		head[headName(q.Name, "pool_mean")] = mx.Full(b, []int{hidden}, 0, mx.Float32)
		head[headName(q.Name, "pool_scale")] = mx.Full(b, []int{hidden}, 1, mx.Float32)
		head[headName(q.Name, "bias")] = mx.Full(b, []int{len(q.Options)}, 0, mx.Float32)
	}
	return head, nil
}

// checkHead reports a head that does not fit task t over a model of the given
// hidden size: a missing or extra weight, or a wrong shape.
func checkHead(head map[string]*mx.Array, t *Task, hidden int) error {
	want := map[string][]int{}
	for _, q := range t.Questions {
		k := len(q.Options)
		want[headName(q.Name, "rows")] = []int{k, hidden}
		want[headName(q.Name, "marker")] = []int{hidden}
		want[headName(q.Name, "pool")] = []int{k, hidden}
		want[headName(q.Name, "pool_mean")] = []int{hidden}
		want[headName(q.Name, "pool_scale")] = []int{hidden}
		want[headName(q.Name, "bias")] = []int{k}
	}
	for name, shape := range want {
		a := head[name]
		if a == nil {
			return fmt.Errorf("decide: head: no %s", name)
		}
		if !slices.Equal(a.Shape(), shape) {
			return fmt.Errorf("decide: head: %s has shape %v, want %v", name, a.Shape(), shape)
		}
	}
	for name := range head {
		if want[name] == nil {
			return fmt.Errorf("decide: head: unexpected weight %s", name)
		}
	}
	return nil
}

// batch is sequences laid out for one forward pass: right-padded to one length
// (a causal model's positions before the padding do not see it), with the
// positions the head reads grouped by question.
type batch struct {
	ids    []int32 // (B, L) row-major
	b, l   int
	groups []group
	tokens int // real tokens, without padding
}

// group is the sequences of one question in a batch.
type group struct {
	question int
	seqs     []int      // indices into the batch's sequences, in order
	query    []int32    // flat position b·L+q of each sequence's query
	markers  []int32    // flat positions of each sequence's markers, K per sequence
	labels   []int32    // the answered option per sequence; -1 when unknown
	spans    [][2]int32 // flat [start, end) of each sequence's state
}

// newBatch lays out seqs; labels[i] is sequence i's answer or -1. pad fills the
// short rows.
func newBatch(seqs []Sequence, labels []int, k func(q int) int, pad int) *batch {
	bt := &batch{b: len(seqs)}
	for _, s := range seqs {
		bt.l = max(bt.l, len(s.Tokens))
		bt.tokens += len(s.Tokens)
	}
	bt.ids = make([]int32, bt.b*bt.l)
	byQ := map[int]int{}
	for i, s := range seqs {
		row := bt.ids[i*bt.l : (i+1)*bt.l]
		for j := range row {
			row[j] = int32(pad)
		}
		for j, t := range s.Tokens {
			row[j] = int32(t)
		}
		gi, ok := byQ[s.Question]
		if !ok {
			gi = len(bt.groups)
			byQ[s.Question] = gi
			bt.groups = append(bt.groups, group{question: s.Question})
		}
		g := &bt.groups[gi]
		if len(s.Markers) != k(s.Question) {
			panic(fmt.Sprintf("decide: sequence of question %d has %d markers, want %d", s.Question, len(s.Markers), k(s.Question)))
		}
		g.seqs = append(g.seqs, i)
		g.query = append(g.query, int32(i*bt.l+s.Query))
		for _, m := range s.Markers {
			g.markers = append(g.markers, int32(i*bt.l+m))
		}
		g.spans = append(g.spans, [2]int32{int32(i*bt.l + s.State[0]), int32(i*bt.l + s.State[1])})
		label := -1
		if labels != nil {
			label = labels[i]
		}
		g.labels = append(g.labels, int32(label))
	}
	return bt
}

// scores runs m once over the batch and returns each group's scores (n, K).
func scores(m *inference.Model, head map[string]*mx.Array, t *Task, bt *batch) []*mx.Array {
	b := m.Backend()
	tokens := mx.FromData(b, mx.Int32, bt.ids, bt.b, bt.l)
	h := m.Hidden(tokens, nil) // (B, L, hidden)
	if h.Err() != nil {
		return []*mx.Array{h}
	}
	hidden := h.Dim(2)
	flat := mx.Reshape(h, bt.b*bt.l, hidden) // (B·L, hidden)
	out := make([]*mx.Array, len(bt.groups))
	for i, g := range bt.groups {
		q := t.Questions[g.question]
		n, k := len(g.query), len(q.Options)
		hq := mx.Take(flat, mx.FromData(b, mx.Int32, g.query, n), 0)                                            // (n, hidden)
		hm := mx.Take(flat, mx.FromData(b, mx.Int32, g.markers, n*k), 0)                                        // (n·K, hidden)
		s := mx.MatmulT(hq, head[headName(q.Name, "rows")], false, true)                                        // (n, K)
		s = mx.Add(s, mx.Reshape(mx.Matmul(hm, mx.Reshape(head[headName(q.Name, "marker")], hidden, 1)), n, k)) // (n, K)
		pooled := mx.Matmul(mx.FromData(b, mx.Float32, g.poolWeights(bt.b*bt.l), n, bt.b*bt.l), flat)           // (n, hidden)
		pooled = mx.Div(mx.Sub(pooled, head[headName(q.Name, "pool_mean")]), head[headName(q.Name, "pool_scale")])
		s = mx.Add(s, mx.MatmulT(pooled, head[headName(q.Name, "pool")], false, true)) // (n, K)
		out[i] = mx.Add(s, head[headName(q.Name, "bias")])
	}
	return out
}

// poolWeights is the (n, positions) matrix that averages each sequence's
// state tokens.
func (g *group) poolWeights(positions int) []float32 {
	w := make([]float32, len(g.spans)*positions)
	for i, sp := range g.spans {
		if sp[1] <= sp[0] {
			continue
		}
		v := 1 / float32(sp[1]-sp[0])
		row := w[i*positions : (i+1)*positions]
		for p := sp[0]; p < sp[1]; p++ {
			row[p] = v
		}
	}
	return w
}

// setPoolStats fills the pooled state's mean and scale per question from up
// to n sequences of each question, scored by m as it is now.
func setPoolStats(m *inference.Model, head map[string]*mx.Array, t *Task, seqs []Sequence, n int, pad int) error {
	b := m.Backend()
	for qi, q := range t.Questions {
		var picked []Sequence
		for _, s := range seqs {
			if s.Question == qi && len(picked) < n {
				picked = append(picked, s)
			}
		}
		if len(picked) < 2 {
			continue
		}
		hidden := m.Config().HiddenSize
		sum, sq := make([]float64, hidden), make([]float64, hidden)
		for start := 0; start < len(picked); start += 16 {
			bt := newBatch(picked[start:min(start+16, len(picked))], nil, func(q int) int { return len(t.Questions[q].Options) }, pad)
			tokens := mx.FromData(b, mx.Int32, bt.ids, bt.b, bt.l)
			flat := mx.Reshape(m.Hidden(tokens, nil), bt.b*bt.l, hidden)
			g := bt.groups[0]
			v, err := mx.Matmul(mx.FromData(b, mx.Float32, g.poolWeights(bt.b*bt.l), len(g.spans), bt.b*bt.l), flat).Float32s()
			if err != nil {
				return fmt.Errorf("decide: pooled state of %q: %w", q.Name, err)
			}
			for i, x := range v {
				sum[i%hidden] += float64(x)
				sq[i%hidden] += float64(x) * float64(x)
			}
		}
		mean, scale := make([]float32, hidden), make([]float32, hidden)
		k := float64(len(picked))
		for d := range mean {
			mu := sum[d] / k
			mean[d] = float32(mu)
			scale[d] = float32(math.Sqrt(max(sq[d]/k-mu*mu, 0)) + 1e-3)
		}
		head[headName(q.Name, "pool_mean")] = mx.FromData(b, mx.Float32, mean, hidden)
		head[headName(q.Name, "pool_scale")] = mx.FromData(b, mx.Float32, scale, hidden)
	}
	return nil
}

// loss is the mean cross-entropy over the batch's answered questions.
func loss(m *inference.Model, head map[string]*mx.Array, t *Task, bt *batch) *mx.Array {
	ss := scores(m, head, t, bt)
	var total *mx.Array
	n := 0
	for i, g := range bt.groups {
		if err := ss[i].Err(); err != nil {
			return ss[i]
		}
		targets := mx.FromData(m.Backend(), mx.Int32, g.labels, len(g.labels))
		ce := mx.Sum(mx.CrossEntropy(ss[i], targets), nil, false)
		if total == nil {
			total = ce
		} else {
			total = mx.Add(total, ce)
		}
		n += len(g.labels)
	}
	if total == nil {
		return mx.Errorf("decide: a batch with no answered questions")
	}
	return mx.MulScalar(total, 1/float32(n))
}
