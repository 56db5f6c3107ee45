package jinja

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Inloop: the render budget. A chat template comes from a downloaded model
// folder, so it is untrusted code: a loop over range(10**9), a string doubled
// forty times or nested loops would run for minutes and take gigabytes, and a
// recursive macro overflows the Go stack, which kills the process (recover
// cannot catch a stack overflow). Every render therefore carries a budget:
//
//   - steps: nodes executed, expressions evaluated, loop iterations, items a
//     filter visits, and one step per 256 bytes a string operation scans;
//   - bytes: strings and list, dict and loop slots built, output included, so
//     the memory a render can take is bounded;
//   - the length of the output and of any one string;
//   - the depth of macro and caller calls in progress (values are walked at
//     most maxValueDepth deep, so a list that holds itself is an error);
//   - a wall-clock timeout, checked every few thousand steps, as a backstop.
//
// Operations that size their result from an argument (range, string repeat,
// replace, join, indent, tojson's indent, str.format, ...) charge the budget
// before they allocate. Exceeding any limit panics with a *BudgetError, which
// render recovers and returns: the evaluator has many paths and no error
// return on some of them (printing a value), and a panic unwinds all of them
// the same way. A nil *budget charges nothing (Render without limits).

// ErrBudget is matched by the error of a render that exceeded its Limits.
var ErrBudget = errors.New("jinja: template exceeded its render budget")

// Limits bound what one render may cost. A zero field is no limit.
type Limits struct {
	Steps   int64         // work units: nodes, expressions, iterations, items, bytes/256 scanned
	Bytes   int64         // bytes of strings, lists and dicts built, output included
	Output  int64         // bytes of the output, and of any one string value
	Depth   int           // macro and caller calls in progress
	Timeout time.Duration // wall clock for the whole render
}

// BudgetError says which limit a render exceeded.
type BudgetError struct {
	Limit string // "steps", "bytes", "output", "string", "depth", "nesting" or "time"
	Max   int64  // the limit (nanoseconds for time)
}

func (e *BudgetError) Error() string {
	switch e.Limit {
	case "steps":
		return fmt.Sprintf("more than %d steps (loops or recursion too long)", e.Max)
	case "bytes":
		return fmt.Sprintf("more than %d bytes of strings and lists built", e.Max)
	case "output":
		return fmt.Sprintf("output longer than %d bytes", e.Max)
	case "string":
		return fmt.Sprintf("a string longer than %d bytes", e.Max)
	case "depth":
		return fmt.Sprintf("macro calls nested more than %d deep", e.Max)
	case "nesting":
		return fmt.Sprintf("values nested more than %d deep (or containing themselves)", e.Max)
	case "time":
		return fmt.Sprintf("rendering took longer than %v", time.Duration(e.Max))
	}
	return "render budget exceeded: " + e.Limit
}

func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// maxValueDepth bounds how deep printing, comparing and encoding walk into
// nested lists and dicts; real chat data (tool schemas) nests a few levels.
const maxValueDepth = 512

// valueSize is what one list or dict slot costs: a Value is a kind and an
// interface (24 bytes), a dict slot also a key and a map entry.
const valueSize = 32

// Budget is one render's account (see Limits). Callables that the caller
// adds to a render's data may charge it too (Step, Grow); a nil *Budget
// charges nothing. It is used by one goroutine.
type Budget struct {
	lim      Limits
	steps    int64
	bytes    int64
	depth    int
	deadline time.Time
}

// NewBudget starts an account for one render (see Template.RenderBudget).
func NewBudget(lim Limits) *Budget {
	b := &Budget{lim: lim}
	if lim.Timeout > 0 {
		b.deadline = time.Now().Add(lim.Timeout)
	}
	return b
}

func (b *Budget) fail(limit string, max int64) {
	panic(&BudgetError{Limit: limit, Max: max})
}

// Step charges one unit of work; when a limit is exceeded it stops the
// render (it panics with a *BudgetError, which the render recovers).
func (b *Budget) Step() { b.step() }

// Grow charges a string that grows from have to have+add bytes; when a
// limit is exceeded it stops the render, as Step does.
func (b *Budget) Grow(have, add int) {
	if b == nil {
		return
	}
	if b.lim.Output > 0 && int64(have)+int64(add) > b.lim.Output {
		b.fail("string", b.lim.Output)
	}
	b.alloc(int64(add))
}

// step charges one unit of work.
func (b *Budget) step() {
	if b == nil {
		return
	}
	b.steps++
	if b.steps&4095 == 0 {
		b.check()
	}
	if b.lim.Steps > 0 && b.steps > b.lim.Steps {
		b.fail("steps", b.lim.Steps)
	}
}

// work charges n units of work (n items visited).
func (b *Budget) work(n int) {
	if b == nil || n <= 0 {
		return
	}
	before := b.steps
	b.steps = satAdd(b.steps, int64(n))
	if b.steps>>12 != before>>12 {
		b.check()
	}
	if b.lim.Steps > 0 && b.steps > b.lim.Steps {
		b.fail("steps", b.lim.Steps)
	}
}

// scan charges the work of reading n bytes.
func (b *Budget) scan(n int) { b.work(n >> 8) }

// check looks at the clock.
func (b *Budget) check() {
	if !b.deadline.IsZero() && time.Now().After(b.deadline) {
		b.fail("time", int64(b.lim.Timeout))
	}
}

// alloc charges n bytes about to be built.
func (b *Budget) alloc(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.bytes = satAdd(b.bytes, n)
	if b.lim.Bytes > 0 && b.bytes > b.lim.Bytes {
		b.fail("bytes", b.lim.Bytes)
	}
	b.scan(int(min(n, math.MaxInt32)))
}

// str charges a string of n bytes about to be built.
func (b *Budget) str(n int64) {
	if b == nil {
		return
	}
	if b.lim.Output > 0 && n > b.lim.Output {
		b.fail("string", b.lim.Output)
	}
	b.alloc(n)
}

// slots charges n list or dict slots about to be built.
func (b *Budget) slots(n int64) { b.alloc(satMul(n, valueSize)) }

// output checks that an output of n bytes is allowed (the bytes themselves
// are charged as they are written).
func (b *Budget) output(n int64) {
	if b != nil && b.lim.Output > 0 && n > b.lim.Output {
		b.fail("output", b.lim.Output)
	}
}

// enter and leave bracket a macro or caller call.
func (b *Budget) enter() {
	if b == nil {
		return
	}
	b.depth++
	if b.lim.Depth > 0 && b.depth > b.lim.Depth {
		b.fail("depth", int64(b.lim.Depth))
	}
}

func (b *Budget) leave() {
	if b != nil {
		b.depth--
	}
}

// nested fails when a value walk goes deeper than maxValueDepth; it applies
// without a budget too, so that a self-containing list never overflows the
// stack.
func nested(depth int) {
	if depth > maxValueDepth {
		panic(&BudgetError{Limit: "nesting", Max: maxValueDepth})
	}
}

// recoverBudget turns a budget panic into *err; other panics go on.
func recoverBudget(err *error) {
	if r := recover(); r != nil {
		be, ok := r.(*BudgetError)
		if !ok {
			panic(r)
		}
		*err = be
	}
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
