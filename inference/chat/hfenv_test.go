package chat

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

// render compiles src in our environment and renders it with data given as
// JSON (key order kept).
func render(t *testing.T, src, data string) string {
	t.Helper()
	tmpl, err := New("test", src, SpecialTokens{})
	if err != nil {
		t.Fatalf("%q: %v", src, err)
	}
	extra := map[string]any{}
	if data != "" {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(data), &raw); err != nil {
			t.Fatal(err)
		}
		for k, v := range raw {
			extra[k] = v
		}
	}
	out, err := tmpl.Render(nil, RenderOptions{Extra: extra})
	if err != nil {
		t.Fatalf("%q: %v", src, err)
	}
	return out
}

// TestWhitespaceLikeJinja2 checks the environment against outputs worked out
// from Jinja2's lexer rules with trim_blocks and lstrip_blocks on.
func TestWhitespaceLikeJinja2(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"trim_blocks", "{% if true %}\nx\n{% endif %}\ny", "x\ny"},
		{"only one newline trimmed", "{% if true %}\n\nx{% endif %}", "\nx"},
		{"lstrip_blocks", "a\n    {% if true %}b{% endif %}", "a\nb"},
		{"lstrip at template start", "  {% if true %}b{% endif %}", "b"},
		{"no lstrip mid-line", "a  {% if true %}b{% endif %}", "a  b"},
		{"no lstrip before expressions", "  {{ 'x' }}", "  x"},
		{"no trim after expressions", "{{ 'a' }}\n{% if true %}b{% endif %}", "a\nb"},
		{"block then expression then newline", "{% if true %}{{ 'x' }}\n{% endif %}", "x\n"},
		{"nested blocks keep the inner newline", "{% if true %}{% if true %}\n\nA{% endif %}{% endif %}", "\nA"},
		{"plus disables lstrip", "  {%+ if true %}x{% endif %}", "  x"},
		{"plus disables trim", "{% if true +%}\nx{% endif %}", "\nx"},
		{"minus strips all", "a  \n {%- if true -%}  \n x \n {%- endif -%} \n b", "axb"},
		{"expression minus", "a \n{{- 'b' -}}\n c", "abc"},
		{"comments", "a {# c #} b\n  {# own line #}\nc", "a  b\nc"},
		{"trailing newline dropped", "x\n", "x"},
		{"only one trailing newline dropped", "x\n\n", "x\n"},
		{"crlf", "a\r\n{% if true %}\r\nb{% endif %}\r\n", "a\nb"},
		{"raw", "{% raw %}{{ x }} {% if %}{% endraw %}", "{{ x }} {% if %}"},
		{"raw whitespace", "  {% raw %}\n{% if %}\n  {% endraw %}\nz", "{% if %}\nz"},
		{"generation tags", "{% generation %}x{% endgeneration %}", "x"},
		{"quotes and backslashes in text", `a\n"b" 'c' \\`, `a\n"b" 'c' \\`},
		{"closer inside a string", `{{ "%} }}" }}`, "%} }}"},
		{"tojson inside a string literal", `{{ "a | tojson" }}`, "a | tojson"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := render(t, tc.src, ""); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestUnclosedTag(t *testing.T) {
	for _, src := range []string{"{{ x", "a {% if", "{# c", "{% raw %}x"} {
		if _, err := New("t", src, SpecialTokens{}); err == nil {
			t.Errorf("%q: got no error", src)
		}
	}
}

// TestTojsonLikePython checks tojson against Python's json.dumps as
// transformers calls it (ensure_ascii=False, keys in insertion order).
func TestTojsonLikePython(t *testing.T) {
	data := `{"x": {"b": 1, "a": [1.5, "<&>", "é\n\u0001", true, null, {}, []]}, "f": [1.0, 1e16, 1e-05, 0.0001, 123.456, 1e+22, -0.5]}`
	for _, tc := range []struct{ src, want string }{
		{"{{ x | tojson }}", `{"b": 1, "a": [1.5, "<&>", "é\n\u0001", true, null, {}, []]}`},
		{"{{ x|tojson(indent=2) }}", "{\n  \"b\": 1,\n  \"a\": [\n    1.5,\n    \"<&>\",\n    \"é\\n\\u0001\",\n    true,\n    null,\n    {},\n    []\n  ]\n}"},
		{"{{ x | tojson(sort_keys=true) }}", `{"a": [1.5, "<&>", "é\n\u0001", true, null, {}, []], "b": 1}`},
		{"{{ x | tojson(separators=(',', ':')) }}", `{"b":1,"a":[1.5,"<&>","é\n\u0001",true,null,{},[]]}`},
		{"{{ x.a[2] | tojson(ensure_ascii=true) }}", `"\u00e9\n\u0001"`},
		{"{{ f | tojson }}", `[1.0, 1e+16, 1e-05, 0.0001, 123.456, 1e+22, -0.5]`},
	} {
		if got := render(t, tc.src, data); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.src, got, tc.want)
		}
	}
}

func TestPyFloatRepr(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{
		{0, "0.0"}, {math.Copysign(0, -1), "-0.0"}, {1, "1.0"}, {0.1, "0.1"}, {1.5, "1.5"},
		{1e15, "1000000000000000.0"}, {1e16, "1e+16"}, {1.25e17, "1.25e+17"}, {0.0001, "0.0001"},
		{0.00001, "1e-05"}, {-2.5e-7, "-2.5e-07"}, {123456.789, "123456.789"}, {1e100, "1e+100"},
		{math.Inf(1), "Infinity"}, {math.Inf(-1), "-Infinity"}, {math.NaN(), "NaN"},
	} {
		if got := pyFloatRepr(tc.f); got != tc.want {
			t.Errorf("pyFloatRepr(%v) = %q, want %q", tc.f, got, tc.want)
		}
	}
}

func TestStrftime(t *testing.T) {
	at := time.Date(2025, time.July, 4, 9, 5, 7, 123456000, time.UTC)
	for _, tc := range []struct{ format, want string }{
		{"%d %b %Y", "04 Jul 2025"},
		{"%Y-%m-%d %H:%M:%S", "2025-07-04 09:05:07"},
		{"%A, %B %-d", "Friday, July 4"},
		{"%I%p %a %y %j %f", "09AM Fri 25 185 123456"},
		{"100%% on %e", "100% on  4"},
		{"Year 2006 Mon Jan %Q", "Year 2006 Mon Jan %Q"},
	} {
		if got := strftime(tc.format, at); got != tc.want {
			t.Errorf("strftime(%q) = %q, want %q", tc.format, got, tc.want)
		}
	}
}
