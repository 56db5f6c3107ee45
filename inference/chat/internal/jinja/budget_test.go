package jinja

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestRangeLen(t *testing.T) {
	for _, tt := range []struct{ start, stop, step, want int64 }{
		{0, 10, 1, 10}, {0, 10, 3, 4}, {10, 0, -1, 10}, {10, 0, -3, 4},
		{0, 0, 1, 0}, {5, 0, 1, 0}, {0, 5, -1, 0},
		{math.MinInt64, math.MaxInt64, 1, math.MaxInt64}, // 2**64-1 items, saturated
		{math.MaxInt64, math.MinInt64, math.MinInt64, 2},
		{math.MinInt64, math.MaxInt64, math.MaxInt64, 3},
	} {
		if got := rangeLen(tt.start, tt.stop, tt.step); got != tt.want {
			t.Errorf("rangeLen(%d, %d, %d) = %d, want %d", tt.start, tt.stop, tt.step, got, tt.want)
		}
	}
	for _, tt := range []struct{ start, stop, step int64 }{{0, 10, 1}, {0, 10, 3}, {10, 0, -1}, {-7, 8, 5}, {8, -7, -5}} {
		var n int64
		if tt.step > 0 {
			for i := tt.start; i < tt.stop; i += tt.step {
				n++
			}
		} else {
			for i := tt.start; i > tt.stop; i += tt.step {
				n++
			}
		}
		if got := rangeLen(tt.start, tt.stop, tt.step); got != n {
			t.Errorf("rangeLen(%d, %d, %d) = %d, want %d", tt.start, tt.stop, tt.step, got, n)
		}
	}
}

// Each limit stops a render that passes it, and says which.
func TestBudgetLimits(t *testing.T) {
	for _, tt := range []struct {
		name, src string
		lim       Limits
		want      string
	}{
		{"steps", `{% for i in range(1000) %}{{ i }}{% endfor %}`, Limits{Steps: 500}, "steps"},
		{"bytes", `{% for i in range(1000) %}{% set x = 'abc' * 100 %}{% endfor %}`, Limits{Bytes: 10000}, "bytes"},
		{"output", `{% for i in range(1000) %}xyz{% endfor %}`, Limits{Output: 100}, "output"},
		{"string", `{% set x = 'abc' * 1000 %}`, Limits{Output: 100}, "string"},
		{"depth", `{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(0) }}`, Limits{Depth: 10}, "depth"},
		{"nesting", `{% set l = [] %}{% set _ = l.append(l) %}{{ l }}`, Limits{}, "nesting"},
		{"time", `{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}`, Limits{Timeout: time.Millisecond}, "time"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := Compile(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tmpl.RenderBudget(nil, NewBudget(tt.lim))
			var be *BudgetError
			if !errors.As(err, &be) || !errors.Is(err, ErrBudget) || be.Limit != tt.want {
				t.Fatalf("got %v, want a *BudgetError for %s", err, tt.want)
			}
		})
	}
}

// Without a budget, and within one, ordinary templates render the same;
// a few of upstream's panics are Python's answers now.
func TestRenderWithinBudget(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{`{{ 'ab' * 3 }}`, "ababab"},
		{`{{ 'ab' * 0 }}|{{ 'ab' * -2 }}`, "|"},
		{`{{ 'a\nb' | indent(-3) }}`, "a\nb"},
		{`{{ [1, 'x', {'k': [None, True]}] }}`, `[1, 'x', {'k': [None, True]}]`},
		{`{{ [1, [2]] == [1, [2]] }}{{ [1] in [[1]] }}`, "TrueTrue"},
		{`{{ range(3) | list | join(',') }}{{ range(5, 0, -2) | join }}`, "0,1,2531"},
		{`{{ 'a-b-c'.replace('-', '+') }}{{ 'x{0}y'.format(1) }}`, "a+b+cx1y"},
		{`{{ __filter_tojson({'a': [1, 2]}, indent=2) }}`, "{\n  \"a\": [\n    1,\n    2\n  ]\n}"},
	} {
		tmpl, err := Compile(tt.src)
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		for _, b := range []*Budget{nil, NewBudget(Limits{Steps: 1e6, Bytes: 1 << 20, Output: 1 << 20, Depth: 10, Timeout: time.Minute})} {
			got, err := tmpl.RenderBudget(nil, b)
			if err != nil || got != tt.want {
				t.Errorf("%s (budget %v) = %q, %v; want %q", tt.src, b != nil, got, err, tt.want)
			}
		}
	}
}

// A value that holds itself cannot be printed or compared even outside a
// render: the walk stops at maxValueDepth with a *BudgetError panic rather
// than a stack overflow.
func TestSelfContainingValue(t *testing.T) {
	l := NewList(nil)
	l.AsList().Append(l)
	for name, f := range map[string]func(){"String": func() { _ = l.String() }, "Equals": func() { _ = l.Equals(l) }} {
		func() {
			defer func() {
				if _, ok := recover().(*BudgetError); !ok {
					t.Errorf("%s of a self-containing list did not stop with a *BudgetError", name)
				}
			}()
			f()
		}()
	}
}
