package trainer

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"

	"github.com/inloop/inloop/inference"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/lora"
	"github.com/inloop/inloop/training/optim"
)

// ErrNonFinite is wrapped by the error of a step whose loss, gradient or updated
// parameters hold a NaN or an infinity.
var ErrNonFinite = errors.New("trainer: loss or gradient is not finite")

// Batch is one micro-batch as the step loop sees it: a loss that is a mean over
// Weight positions, and what the batch costs to read.
type Batch struct {
	// Loss is the scalar loss of the batch computed by m, the model Bind gave
	// for params. params are the same arrays Bind received (traced while
	// differentiating), for a loss with parameters of its own beside the model
	// (a decision head). To fail, return an error array made with
	// mx.Errorf("...: %w", err): the chain reaches the caller of Step.
	Loss func(m *inference.Model, params map[string]*mx.Array) *mx.Array
	// Weight is what Loss averages over, the positions it learns from: it
	// weights this batch in gradient accumulation, in the step's loss and in
	// Evaluate. It must be positive.
	Weight float32
	// Tokens is the number of tokens the batch reads, for throughput.
	Tokens int64
}

// NextToken is the masked next-token cross-entropy of bt: the mean over its
// learned positions (inference.Model.Loss, in chunks of positions). Its arrays
// are made on the model's backend when the loss runs, so a Batch holds no
// backend memory until then.
func NextToken(bt data.Batch) Batch { return NextTokenWith(bt, inference.LossOptions{}) }

// NextTokenWith is NextToken computed as o says (checkpointed blocks, say).
func NextTokenWith(bt data.Batch, o inference.LossOptions) Batch {
	var learned float32
	var tokens int64
	for _, v := range bt.Mask {
		learned += v
	}
	for _, n := range bt.Lengths {
		tokens += int64(n)
	}
	return Batch{
		Weight: learned,
		Tokens: tokens,
		Loss: func(m *inference.Model, _ map[string]*mx.Array) *mx.Array {
			b := m.Backend()
			ids := mx.FromData(b, mx.Int32, bt.IDs, bt.B, bt.L)         // (B, L)
			targets := mx.FromData(b, mx.Int32, bt.Targets, bt.B, bt.L) // (B, L)
			mask := mx.FromData(b, mx.Float32, bt.Mask, bt.B, bt.L)     // (B, L)
			return m.Loss(ids, targets, mask, o)
		},
	}
}

// ExampleBatches groups examples as opt says and yields the next-token Batch of
// each, the first n batches (all when n < 0) in the Batcher's order: what
// Evaluate reads a validation or anchor set with.
func ExampleBatches(examples []data.Example, opt data.BatchOptions, n int) (iter.Seq[Batch], error) {
	bt, err := data.NewBatcher(examples, opt)
	if err != nil {
		return nil, err
	}
	if n < 0 || n > bt.Len() {
		n = bt.Len()
	}
	return func(yield func(Batch) bool) {
		for range n {
			if !yield(NextToken(bt.Next())) {
				return
			}
		}
	}, nil
}

// Stepper is the training step every trainer in Inloop shares: the LoRA
// trainer, the pretrainer, and the adaptation loops that take a few steps on an
// in-memory model. It differentiates the loss of each micro-batch with respect
// to the trainable parameters, accumulates the gradients weighted by each
// batch's Weight, clips them, refuses non-finite values and applies the
// optimizer.
type Stepper struct {
	// Bind returns the model that computes with params. A binder that changes
	// the model in place (Adapters) is called again with the untraced
	// parameters after each differentiation, so the model never keeps traced
	// arrays.
	Bind func(params map[string]*mx.Array) (*inference.Model, error)
	// Optimizer turns the gradients into the next parameters; its update count
	// numbers the steps.
	Optimizer optim.Optimizer
	// ClipNorm caps the global gradient norm; 0 leaves gradients as they are.
	ClipNorm float64
}

// Adapters binds params as the weights of m's top adapter (lora.SetParams), in
// place: the binder for training an adapter over frozen base weights. Each
// call is a change of m's adapters, with a new adapter version.
func Adapters(m *inference.Model) func(map[string]*mx.Array) (*inference.Model, error) {
	return func(p map[string]*mx.Array) (*inference.Model, error) {
		return m, lora.SetParams(m, p)
	}
}

// Weights binds params as m's own weights on a copy (m.WithParams): the binder
// for training every weight, as the pretrainer does.
func Weights(m *inference.Model) func(map[string]*mx.Array) (*inference.Model, error) {
	return m.WithParams
}

// StepResult is what one Step did.
type StepResult struct {
	Params   map[string]*mx.Array // the parameters after the update, evaluated
	Step     int                  // the optimizer's update count after this step
	Loss     float64              // the Weight-weighted mean loss of the micro-batches
	Weight   float64              // the micro-batches' summed Weight
	Tokens   int64                // tokens read
	LR       float64              // the learning rate the update used
	GradNorm float64              // global gradient norm before clipping; NaN when ClipNorm is 0
}

// Step takes one optimizer step from params over the micro-batches (gradient
// accumulation when there are several) and returns the new parameters. params
// is not changed; on success the model is bound to the new parameters, on an
// error to params again. ctx is checked before each micro-batch. A NaN or
// infinite loss, gradient or updated parameter stops the step with an error
// wrapping ErrNonFinite, before the optimizer's state changes.
func (s *Stepper) Step(ctx context.Context, params map[string]*mx.Array, batches []Batch) (StepResult, error) {
	res := StepResult{Loss: math.NaN(), GradNorm: math.NaN()}
	if len(batches) == 0 {
		return res, errors.New("trainer: step: no batches")
	}
	if s.Bind == nil || s.Optimizer == nil {
		return res, errors.New("trainer: step: Stepper needs Bind and Optimizer")
	}
	step := s.Optimizer.Steps() + 1
	names, xs := optim.Flatten(params)
	var acc optim.Accumulator
	var grads map[string]*mx.Array
	var lossSum float64
	for k, bt := range batches {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if !(bt.Weight > 0) {
			return res, fmt.Errorf("trainer: step %d: micro-batch %d has weight %g, want > 0", step, k, bt.Weight)
		}
		loss, g, err := s.gradient(names, xs, params, bt)
		if err != nil {
			return res, fmt.Errorf("trainer: step %d: %w", step, err)
		}
		if math.IsNaN(float64(loss)) || math.IsInf(float64(loss), 0) {
			return res, fmt.Errorf("%w: at step %d, the loss of micro-batch %d is %v", ErrNonFinite, step, k, loss)
		}
		lossSum += float64(loss) * float64(bt.Weight)
		res.Weight += float64(bt.Weight)
		res.Tokens += bt.Tokens
		if len(batches) == 1 {
			grads = g
		} else if err := acc.AddWeighted(g, bt.Weight); err != nil {
			return res, err
		}
	}
	if len(batches) > 1 {
		var err error
		if grads, err = acc.Mean(); err != nil {
			return res, err
		}
	}
	// Clipping, the checks and the update are a dozen ops per parameter: issued
	// where the backend runs them (mx.Run), they skip a hand-over each on MLX.
	// Bind takes the model's adapter lock, so it runs outside.
	var next map[string]*mx.Array
	var saved optim.State
	var err error
	mx.Run(xs[0].Backend(), func() {
		// A finite global norm means finite gradients: the check is then done.
		checked := false
		if s.ClipNorm > 0 {
			var n float32
			if grads, n, err = optim.ClipGlobalNormRead(grads, float32(s.ClipNorm)); err != nil {
				err = fmt.Errorf("trainer: step %d: %w", step, err)
				return
			}
			res.GradNorm = float64(n)
			checked = !math.IsNaN(res.GradNorm) && !math.IsInf(res.GradNorm, 0)
		}
		if !checked {
			if err = finite(grads, "gradient of", step); err != nil {
				return
			}
		}
		// The optimizer keeps its new state only when the update is usable: on a
		// non-finite update, or a model that refuses it, the old state comes back,
		// so a caller may retry or carry on from params.
		saved = s.Optimizer.State()
		res.LR = float64(s.Optimizer.LearningRate())
		if next, err = s.Optimizer.Step(params, grads); err != nil {
			err = fmt.Errorf("trainer: step %d: %w", step, err)
			next = nil
			return
		}
		err = finite(next, "update of", step)
	})
	if next == nil {
		return res, err
	}
	if err == nil {
		if _, err = s.Bind(next); err != nil {
			s.Bind(params)
			err = fmt.Errorf("trainer: step %d: %w", step, err)
		}
	}
	if err != nil {
		if serr := s.Optimizer.SetState(saved); serr != nil {
			err = errors.Join(err, serr)
		}
		return res, err
	}
	res.Params, res.Step = next, s.Optimizer.Steps()
	res.Loss = lossSum / res.Weight
	return res, nil
}

// gradient differentiates one micro-batch's loss and binds params again.
func (s *Stepper) gradient(names []string, xs []*mx.Array, params map[string]*mx.Array, bt Batch) (float32, map[string]*mx.Array, error) {
	outs, gs, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
		traced := optim.Unflatten(names, p)
		m, err := s.Bind(traced)
		if err != nil {
			// mlxbridge has no exported constructor for an array carrying an
			// error as it is; %w keeps the chain under its "mlxbridge: " prefix.
			return []*mx.Array{mx.ErrorArray(err)}
		}
		return []*mx.Array{bt.Loss(m, traced)}
	}, xs)
	if _, berr := s.Bind(params); err == nil && berr != nil {
		err = berr
	}
	if err != nil {
		return 0, nil, err
	}
	loss, err := outs[0].Item()
	if err != nil {
		return 0, nil, err
	}
	return loss, optim.Unflatten(names, gs), nil
}

// finite evaluates the arrays and wraps ErrNonFinite naming those that are not
// finite.
func finite(named map[string]*mx.Array, what string, step int) error {
	_, xs := optim.Flatten(named)
	if err := mx.Eval(xs...); err != nil {
		return fmt.Errorf("trainer: step %d: %w", step, err)
	}
	ok, err := optim.AllFinite(xs...)
	if err != nil {
		return fmt.Errorf("trainer: step %d: %w", step, err)
	}
	if ok {
		return nil
	}
	bad, _ := optim.NonFinite(named)
	return fmt.Errorf("%w: at step %d, %s %v", ErrNonFinite, step, what, bad)
}

// Evaluate is the Weight-weighted mean loss of the batches under params,
// without gradients; NaN when there are none. The model is left bound to
// params. The caller turns training-only behaviour (LoRA dropout) off first.
func (s *Stepper) Evaluate(ctx context.Context, params map[string]*mx.Array, batches iter.Seq[Batch]) (float64, error) {
	if s.Bind == nil {
		return math.NaN(), errors.New("trainer: evaluate: Stepper needs Bind")
	}
	m, err := s.Bind(params)
	if err != nil {
		return math.NaN(), err
	}
	var sum, weight float64
	for bt := range batches {
		if err := ctx.Err(); err != nil {
			return math.NaN(), err
		}
		var loss float32
		mx.Run(m.Backend(), func() { loss, err = bt.Loss(m, params).Item() })
		if err != nil {
			return math.NaN(), fmt.Errorf("trainer: evaluate: %w", err)
		}
		sum += float64(loss) * float64(bt.Weight)
		weight += float64(bt.Weight)
	}
	if weight == 0 {
		return math.NaN(), nil
	}
	return sum / weight, nil
}
