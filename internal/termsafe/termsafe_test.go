package termsafe

import "testing"

func TestString(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"plain text, é and 字 and 😀", "plain text, é and 字 and 😀"},
		{"two\nlines\twith a tab\r\n", "two\nlines\twith a tab\r\n"},
		{"model.layers.0\x1b[2J\x1b]0;pwned\x07.weight", `model.layers.0\x1b[2J\x1b]0;pwned\x07.weight`},
		{"8-bit CSI \u009b31m", `8-bit CSI \u009b31m`},
		{"DEL \x7f, NUL \x00", `DEL \x7f, NUL \x00`},
		{"back\rto the start", `back\x0dto the start`},
		{"bad \xff\xfe bytes", `bad \xff\xfe bytes`},
		{"evil\u202etxt.exe", `evil\u202etxt.exe`},
		{"isolate \u2066x\u2069", `isolate \u2066x\u2069`},
		{"line\u2028sep", `line\u2028sep`},
	} {
		if got := String(tt.in); got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzString(f *testing.F) {
	f.Add("a\x1b[31mb\u009b\xff\r\n")
	f.Fuzz(func(t *testing.T, s string) {
		out := String(s)
		for i, r := range out {
			if unsafe(out, i, r, len(string(r))) && !(r == 0xfffd && len(string(r)) == 3) {
				t.Fatalf("String(%q) = %q still holds %U at %d", s, out, r, i)
			}
		}
		if String(out) != out {
			t.Fatalf("String is not idempotent on %q", s)
		}
	})
}
