package chat

import (
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// hostileTemplates are chat templates a hostile (or broken) model folder can
// ship. Each must fail within the render budget, with ErrTooExpensive, and
// leave the process alive. Before the budget, the loops ran for minutes and
// took gigabytes, and the recursive macro killed the process with a Go stack
// overflow.
var hostileTemplates = []struct {
	name, src string
}{
	{"huge range", `{% for i in range(10**9) %}x{% endfor %}`},
	{"huge range of a huge step count", `{% for i in range(-9223372036854775807, 9223372036854775807) %}{% endfor %}`},
	{"nested loops", `{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`},
	{"nested loops printing", `{% for i in range(30000) %}{% for j in range(30000) %}{{ i }}{% endfor %}{% endfor %}`},
	{"string doubling", `{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}`},
	{"string doubling with +", `{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}`},
	{"string repeat", `{{ 'x' * 10000000000 }}`},
	{"string repeat overflowing", `{{ 'abcdefgh' * 9223372036854775807 }}`},
	{"list doubling", `{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}`},
	{"list of lists printed", `{% set ns = namespace(l=['x' * 1000]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}`},
	{"list of lists compared", `{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l == ns.l }}`},
	{"list of lists as JSON", `{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l | tojson }}`},
	{"list of lists joined", `{% set ns = namespace(l=['x' * 1000000]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | join(',') }}`},
	{"self-containing list printed", `{% set l = [] %}{% set _ = l.append(l) %}{{ l }}`},
	{"self-containing list as JSON", `{% set l = [] %}{% set _ = l.append(l) %}{{ l | tojson }}`},
	{"self-containing list compared", `{% set l = [] %}{% set _ = l.append(l) %}{% set m = [] %}{% set _ = m.append(m) %}{{ l == m }}`},
	{"self-containing dict printed", `{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}`},
	{"recursive macro", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`},
	{"recursive macro as a filter", `{% macro f(x) %}{{ x | f }}{% endmacro %}{{ 1 | f }}`},
	{"mutually recursive macros", `{% macro a(n) %}{{ b(n) }}{% endmacro %}{% macro b(n) %}{{ a(n) }}{% endmacro %}{{ a(0) }}`},
	{"recursive caller", `{% macro m() %}{{ caller() }}{% endmacro %}{% macro r() %}{% call m() %}{{ r() }}{% endcall %}{% endmacro %}{{ r() }}`},
	{"exponential macro", `{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}`},
	{"replace amplifying", `{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = ns.s | replace('x', 'xx') %}{% endfor %}`},
	{"replace with empty old", `{{ ('x' * 100000) | replace('', 'y' * 100000) }}`},
	{"str.replace amplifying", `{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = ns.s.replace('x', 'xxx') %}{% endfor %}`},
	{"str.format amplifying", `{% set ns = namespace(s='{0}{0}') %}{% for i in range(64) %}{% set ns.s = ns.s.format(ns.s) %}{% endfor %}`},
	{"indent", `{{ 'a\nb\nc' | indent(10000000000) }}`},
	{"indent of many lines", `{{ (('\n' * 1000000) ~ 'x') | indent(100000, true) }}`},
	{"tojson indent", `{{ [1, [2, [3]]] | tojson(indent=10000000000) }}`},
	{"upstream tojson indent", `{{ __filter_tojson([1, [2, [3]]], indent=10000000000) }}`},
	{"tojson separators", `{{ range(1000000) | list | tojson(separators=('x' * 100000, ':')) }}`},
	{"huge output", `{% for i in range(100000000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}`},
	{"list.insert quadratic", `{% set l = [] %}{% for i in range(1000000) %}{% set _ = l.insert(0, i) %}{% endfor %}`},
	{"string index quadratic", `{% set s = 'x' * 10000000 %}{% for i in range(1000000) %}{{ s[i] }}{% endfor %}`},
	{"string compare quadratic", `{% set s = 'x' * 10000000 %}{% set t = 'x' * 10000000 %}{% for i in range(1000000) %}{% if s == t %}{% endif %}{% endfor %}`},
	{"sort of a huge list", `{{ range(100000000) | list | sort | length }}`},
	{"iterate a huge string", `{% for c in 'x' * 100000000 %}{% endfor %}`},
	{"fromjson bomb", `{{ ('[' ~ ('[1],' * 10000000) ~ '1]') | fromjson | length }}`},
	{"strftime_now format", `{{ strftime_now('%A' * 100000000) }}`},
	{"raise_exception message", `{{ raise_exception('x' * 10000000000) }}`},
}

// renderBounded renders src for a short conversation in a goroutine and fails
// the test if it does not finish in 5 s (a generous bound for a loaded
// machine: the budget's own limits end a render in about a second at most).
func renderBounded(t *testing.T, src string) (string, error) {
	t.Helper()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		tmpl, err := New("hostile", src, SpecialTokens{EOS: "</s>"})
		if err != nil {
			done <- result{"", err}
			return
		}
		out, err := tmpl.Render([]Message{{Role: "user", Content: "hello"}}, RenderOptions{AddGenerationPrompt: true})
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		t.Logf("finished in %v", time.Since(start).Round(time.Millisecond))
		return r.out, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("still rendering after 5 s")
		return "", nil
	}
}

func TestHostileTemplatesFailWithinBudget(t *testing.T) {
	for _, tt := range hostileTemplates {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			out, err := renderBounded(t, tt.src)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatalf("rendered %d bytes, want ErrTooExpensive", len(out))
			}
			if !errors.Is(err, ErrTooExpensive) || !strings.HasPrefix(err.Error(), "chat template too expensive: ") {
				t.Fatalf("got %v, want an error matching ErrTooExpensive that starts %q", err, "chat template too expensive: ")
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 1<<30 {
				t.Errorf("the render allocated %d MB, want well under 1 GB", got>>20)
			}
			t.Log(err)
		})
	}
}

// Templates nested beyond what the parser recurses on are refused when they
// are compiled, and a 1 MB template of many tags compiles in linear time.
func TestHostileTemplatesFailToCompile(t *testing.T) {
	for _, tt := range []struct{ name, src, want string }{
		{"nested parentheses", "{{ " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + " }}", "nested more than"},
		{"nested not", "{{ " + strings.Repeat("not ", 100000) + "1 }}", "nested more than"},
		{"nested minus", "{{ " + strings.Repeat("-", 100000) + "1 }}", "nested more than"},
		{"nested lists", "{{ " + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + " }}", "nested more than"},
		{"nested subscripts", "{{ a" + strings.Repeat("[a", 100000) + strings.Repeat("]", 100000) + " }}", "nested more than"},
		{"long chain", "{{ 1" + strings.Repeat(" + 1", 300000) + " }}", "more than 1024 operators"},
		{"long filter chain", "{{ x" + strings.Repeat("|trim", 200000) + " }}", "more than 1024 operators"},
		{"nested ifs", strings.Repeat("{% if true %}", 100000) + strings.Repeat("{% endif %}", 100000), "nested more than"},
		{"nested fors", strings.Repeat("{% for x in y %}", 100000) + strings.Repeat("{% endfor %}", 100000), "nested more than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := renderBounded(t, tt.src)
			var te *Error
			if !errors.As(err, &te) || te.Op != "parse" || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want a parse error mentioning %q", err, tt.want)
			}
		})
	}
	for _, tt := range []struct{ name, src string }{
		{"many tags", strings.Repeat("{{ x }}\n", maxTemplateBytes/8)},
		{"many comments", strings.Repeat("{# c #}", maxTemplateBytes/7)},
		{"many statements", strings.Repeat("{% set x = 1 %}", maxTemplateBytes/15)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := renderBounded(t, tt.src); err != nil && !errors.Is(err, ErrTooExpensive) {
				t.Fatalf("got %v, want a render or ErrTooExpensive", err)
			}
		})
	}
}

// A template that is merely big-but-reasonable renders: the budget scales
// with the conversation, so a long chat with long messages fits.
func TestBudgetFitsLongConversations(t *testing.T) {
	tmpl := ChatML(SpecialTokens{})
	long := strings.Repeat("All work and no play makes Jack a dull boy. ", 20000) // ~880 KB
	var msgs []Message
	for i := range 2000 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, Message{Role: role, Content: "message " + strings.Repeat("x", i)})
	}
	msgs = append(msgs, Message{Role: "user", Content: long})
	start := time.Now()
	out, err := tmpl.Render(msgs, RenderOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages, %d bytes rendered in %v", len(msgs), len(out), time.Since(start))
	if !strings.Contains(out, long) {
		t.Error("the long message is not in the prompt")
	}
}

// FuzzRender compiles and renders arbitrary template source, seeded with the
// real templates of testdata/models and the hostile ones above: every input
// must end in a prompt or a clean error (Render recovers what the engine
// panics with) well within the budget's second.
func FuzzRender(f *testing.F) {
	for _, tt := range hostileTemplates {
		f.Add(tt.src)
	}
	dirs, _ := filepath.Glob(filepath.Join("testdata", "models", "*"))
	for _, dir := range dirs {
		if tmpl, err := LoadTemplate(dir); err == nil {
			f.Add(tmpl.Source())
		}
	}
	msgs := []Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "What is 2+2?"},
		{Role: "assistant", Content: "4", ReasoningContent: "2+2=4"},
		{Role: "user", Content: "And 3+3?"},
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > maxTemplateBytes {
			return
		}
		start := time.Now()
		tmpl, err := New("fuzz", src, SpecialTokens{BOS: "<s>", EOS: "</s>"})
		if err == nil {
			var out string
			out, err = tmpl.Render(msgs, RenderOptions{AddGenerationPrompt: true})
			if lim := renderLimits(msgs, RenderOptions{}); int64(len(out)) > lim.Output {
				t.Fatalf("rendered %d bytes, over the %d allowed", len(out), lim.Output)
			}
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("took %v (error %v)", el, err)
		}
	})
}

// raise_exception's message is the template's text: it is quoted in the
// error, so escape sequences in it cannot act on a terminal.
func TestRaisedMessageQuoted(t *testing.T) {
	tmpl, err := New("evil", "{{ raise_exception('roles \x1b[2J\x1b]0;pwned\x07 must alternate') }}", SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render([]Message{{Role: "user", Content: "hi"}}, RenderOptions{})
	if !errors.Is(err, ErrRaised) || strings.ContainsAny(err.Error(), "\x1b\x07") || !strings.Contains(err.Error(), `"roles \x1b[2J`) {
		t.Errorf("got %q, want the message quoted", err)
	}
}
