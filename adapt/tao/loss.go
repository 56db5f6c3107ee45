package tao

import (
	"fmt"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/trainer"
)

// sequence is a prompt followed by an answer: the tokens and where the
// answer begins. Only the answer's tokens are learned.
type sequence struct {
	ids   []int
	start int // index in ids of the answer's first token
}

// answerLen is how many tokens of the answer are predicted.
func (s sequence) answerLen() int { return len(s.ids) - s.start }

// laidOut is sequences as one right-padded next-token batch: ids and targets
// (B, L), and mask (B, L) that is 1 where the target is an answer token.
type laidOut struct {
	b, l                int
	ids, targets        []int32
	mask                []float32
	tokens, answerToken int
}

func layOut(seqs []sequence, pad int) laidOut {
	lo := laidOut{b: len(seqs)}
	for _, s := range seqs {
		lo.l = max(lo.l, len(s.ids)-1)
	}
	n := lo.b * lo.l
	lo.ids, lo.targets, lo.mask = make([]int32, n), make([]int32, n), make([]float32, n)
	for r, s := range seqs {
		for i := range lo.l {
			k := r*lo.l + i
			if i+1 >= len(s.ids) {
				lo.ids[k], lo.targets[k] = int32(pad), int32(pad)
				continue
			}
			lo.ids[k], lo.targets[k] = int32(s.ids[i]), int32(s.ids[i+1])
			if i+1 >= s.start {
				lo.mask[k] = 1
				lo.answerToken++
			}
		}
		lo.tokens += len(s.ids)
	}
	return lo
}

// answerNLL is each row's summed negative log-likelihood of its answer
// tokens, −log π(answer | prompt): (B,).
func answerNLL(m *inference.Model, lo laidOut) *mx.Array {
	b := m.Backend()
	ids := mx.FromData(b, mx.Int32, lo.ids, lo.b, lo.l)         // (B, L)
	targets := mx.FromData(b, mx.Int32, lo.targets, lo.b, lo.l) // (B, L)
	mask := mx.FromData(b, mx.Float32, lo.mask, lo.b, lo.l)     // (B, L)
	ce := mx.CrossEntropy(m.Forward(ids, nil), targets)         // (B, L)
	return mx.Sum(mx.Mul(ce, mask), []int{1}, false)            // (B,)
}

// LogProbs returns log π(answer | prompt) of each sequence under m, in
// batches of at most batch rows: the reference the preference loss measures
// the policy's movement against.
func logProbs(m *inference.Model, seqs []sequence, pad, batch int) ([]float64, error) {
	out := make([]float64, 0, len(seqs))
	for lo := 0; lo < len(seqs); lo += batch {
		nll, err := answerNLL(m, layOut(seqs[lo:min(lo+batch, len(seqs))], pad)).Float32s()
		if err != nil {
			return nil, fmt.Errorf("tao: log-probabilities: %w", err)
		}
		for _, v := range nll {
			out = append(out, -float64(v))
		}
	}
	return out, nil
}

// pair is one prompt's best and worst candidate, with their log-probabilities
// under the reference (the adapter before training).
type pair struct {
	chosen, rejected       sequence
	refChosen, refRejected float64
}

// lossBatch is the training loss of one step over pairs:
//
//	L = NLL(best answers) + λ·mean DPO(best, worst),
//
// where NLL is the mean per-token negative log-likelihood of the best
// answers — best-of-n fine-tuning — and, with λ > 0, DPO is the direct
// preference loss of Rafailov et al. (arXiv 2305.18290),
//
//	DPO = −log σ(β·[(log π(y_w|x) − log π_ref(y_w|x)) − (log π(y_l|x) − log π_ref(y_l|x))]),
//
// which raises the best answer's likelihood relative to the worst's, measured
// against the reference so a pair already ordered pulls less. Both come from
// one forward pass over the best and worst answers together. The Batch's
// Weight is the number of best-answer tokens.
func lossBatch(pairs []pair, lambda, beta float64, pad int) trainer.Batch {
	seqs := make([]sequence, 0, 2*len(pairs))
	for _, p := range pairs {
		seqs = append(seqs, p.chosen)
	}
	if lambda > 0 {
		for _, p := range pairs {
			seqs = append(seqs, p.rejected)
		}
	}
	lo := layOut(seqs, pad)
	n := len(pairs)
	var chosenTokens float32
	for _, p := range pairs {
		chosenTokens += float32(p.chosen.answerLen())
	}
	ref := make([]float32, 2*n) // (2n,): the reference's log π, best rows then worst rows
	for i, p := range pairs {
		ref[i], ref[n+i] = float32(p.refChosen), float32(p.refRejected)
	}
	return trainer.Batch{
		Weight: chosenTokens,
		Tokens: int64(lo.tokens),
		Loss: func(m *inference.Model, _ map[string]*mx.Array) *mx.Array {
			nll := answerNLL(m, lo) // (B,)
			loss := mx.MulScalar(mx.Sum(mx.SliceAxis(nll, 0, 0, n), nil, false), 1/chosenTokens)
			if lambda == 0 {
				return loss
			}
			r := mx.FromData(m.Backend(), mx.Float32, ref, 2*n)
			moved := mx.Sub(mx.Neg(nll), r)                                                                        // (2n,): log π − log π_ref
			z := mx.MulScalar(mx.Sub(mx.SliceAxis(moved, 0, 0, n), mx.SliceAxis(moved, 0, n, 2*n)), float32(beta)) // (n,)
			dpo := mx.Mean(softplus(mx.Neg(z)), nil, false)
			return mx.Add(loss, mx.MulScalar(dpo, float32(lambda)))
		},
	}
}

// softplus is log(1 + eˣ), written so neither branch overflows:
// max(x, 0) + log(1 + e^−|x|).
func softplus(x *mx.Array) *mx.Array {
	a := mx.Abs(x)
	relu := mx.MulScalar(mx.Add(x, a), 0.5)
	return mx.Add(relu, mx.Log(mx.AddScalar(mx.Exp(mx.Neg(a)), 1)))
}
