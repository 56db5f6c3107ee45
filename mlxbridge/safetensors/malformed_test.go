package safetensors

import (
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// entry is one tensor's header entry, for building malformed headers.
func entry(name, dtype, shape, offsets string) string {
	return `"` + name + `":{"dtype":"` + dtype + `","shape":` + shape + `,"data_offsets":` + offsets + `}`
}

// lengthOnly is a file whose 8-byte length claims n, followed by rest.
func lengthOnly(n uint64, rest string) []byte {
	b := binary.LittleEndian.AppendUint64(nil, n)
	return append(b, rest...)
}

func TestParseRejects(t *testing.T) {
	four := []byte{1, 2, 3, 4}
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"empty file", nil, "shorter than the 8-byte header length"},
		{"seven bytes", []byte{2, 0, 0, 0, 0, 0, 0}, "shorter than the 8-byte header length"},
		{"header over cap", lengthOnly(MaxHeaderSize+1, "{}"), "exceeds the"},
		{"huge header length", lengthOnly(1<<63, "{}"), "exceeds the"},
		{"header past end", lengthOnly(64, "{}"), "runs past the end"},
		{"zero header", lengthOnly(0, ""), "does not start with '{'"},
		{"invalid utf-8", withLength("{\"\xff\":1}"), "not valid UTF-8"},
		{"leading space", withLength(` {}`), "does not start with '{'"},
		{"invalid json", withLength(`{"a":`), "invalid header JSON"},
		{"invalid json token", withLength(`{"a" 1}`), "invalid header JSON"},
		{"not an object", withLength(`[]`), "does not start with '{'"},
		{"second value", withLength(`{}{}`), `unexpected "{" after the header object`},
		{"trailing string", withLength(`{} "x"`), `unexpected string "x" after the header object`},
		{"trailing garbage", withLength(`{} x`), "unexpected data after the header"},
		{"entry not object", withLength(`{"a":[1]}`), `tensor "a": entry: got "["`},
		{"unknown dtype", withLength(`{`+entry("a", "F128", "[1]", "[0,16]")+`}`, make([]byte, 16)...), `tensor "a": unknown dtype "F128"`},
		{"lowercase dtype", withLength(`{`+entry("a", "f32", "[1]", "[0,4]")+`}`, four...), "unknown dtype"},
		{"dtype not string", withLength(`{"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, four...), "dtype is 4, not a string"},
		{"negative dim", withLength(`{`+entry("a", "U8", "[2,-2]", "[0,4]")+`}`, four...), "negative dimension -2"},
		{"fractional dim", withLength(`{`+entry("a", "U8", "[4.0]", "[0,4]")+`}`, four...), "not a 64-bit integer"},
		{"dim too big for int64", withLength(`{`+entry("a", "U8", "[99999999999999999999]", "[0,4]")+`}`, four...), "not a 64-bit integer"},
		{"shape not array", withLength(`{`+entry("a", "U8", "4", "[0,4]")+`}`, four...), "shape: got 4"},
		{"rank too high", withLength(`{` + entry("a", "U8", "["+strings.Repeat("1,", maxRank)+"1]", "[0,1]") + `}`), "more than 64 values"},
		{"shape overflow", withLength(`{`+entry("a", "U8", "[2147483647,2147483647,2147483647]", "[0,4]")+`}`, four...), "overflows the element count"},
		{"shape overflow by size", withLength(`{`+entry("a", "F64", "[2147483647,2147483647,2]", "[0,4]")+`}`, four...), "overflows the element count"},
		{"one offset", withLength(`{`+entry("a", "U8", "[4]", "[4]")+`}`, four...), "data_offsets has 1 values, want 2"},
		{"three offsets", withLength(`{`+entry("a", "U8", "[4]", "[0,4,4]")+`}`, four...), "data_offsets has 3 values, want 2"},
		{"offset string", withLength(`{`+entry("a", "U8", "[4]", `["0",4]`)+`}`, four...), `data_offsets holds string "0", not an integer`},
		{"negative offset", withLength(`{`+entry("a", "U8", "[4]", "[-4,0]")+`}`, four...), "negative data_offsets"},
		{"float offset", withLength(`{`+entry("a", "U8", "[4]", "[0,4e0]")+`}`, four...), "not a 64-bit integer"},
		{"begin after end", withLength(`{`+entry("a", "U8", "[0]", "[4,0]")+`}`, four...), "begin 4 > end 0"},
		{"end beyond data", withLength(`{`+entry("a", "U8", "[8]", "[0,8]")+`}`, four...), "end 8 is beyond the 4-byte data region"},
		{"size mismatch", withLength(`{`+entry("a", "F32", "[2]", "[0,4]")+`}`, four...), "span 4 bytes, but F32[2] needs 8"},
		{"overlap", withLength(`{`+entry("a", "U8", "[4]", "[0,4]")+`,`+entry("b", "U8", "[2]", "[2,4]")+`}`, four...), `tensor "b": data_offsets [2,4] overlap tensor "a"`},
		{"empty inside another", withLength(`{`+entry("a", "U8", "[4]", "[0,4]")+`,`+entry("b", "U8", "[0]", "[2,2]")+`}`, four...), "overlap"},
		{"same range twice", withLength(`{`+entry("a", "U8", "[4]", "[0,4]")+`,`+entry("b", "U8", "[4]", "[0,4]")+`}`, four...), "overlap"},
		{"hole", withLength(`{`+entry("a", "U8", "[2]", "[0,2]")+`,`+entry("b", "U8", "[1]", "[3,4]")+`}`, four...), "leave a hole: no tensor covers bytes [2,3)"},
		{"hole at start", withLength(`{`+entry("a", "U8", "[2]", "[2,4]")+`}`, four...), "leave a hole"},
		{"trailing bytes", withLength(`{`+entry("a", "U8", "[2]", "[0,2]")+`}`, four...), "2 trailing bytes after the last tensor"},
		{"data but no tensors", withLength(`{}`, four...), "4 trailing bytes"},
		{"duplicate tensor", withLength(`{`+entry("a", "U8", "[4]", "[0,4]")+`,`+entry("a", "U8", "[0]", "[4,4]")+`}`, four...), `duplicate header key "a"`},
		{"duplicate metadata", withLength(`{"__metadata__":{},"__metadata__":{}}`), `duplicate header key "__metadata__"`},
		{"duplicate field", withLength(`{"a":{"dtype":"U8","dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, four...), `duplicate field "dtype"`},
		{"duplicate offsets", withLength(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4],"data_offsets":[0,4]}}`, four...), `duplicate field "data_offsets"`},
		{"missing dtype", withLength(`{"a":{"shape":[4],"data_offsets":[0,4]}}`, four...), "missing dtype"},
		{"missing shape", withLength(`{"a":{"dtype":"U8","data_offsets":[0,4]}}`, four...), "missing shape"},
		{"missing offsets", withLength(`{"a":{"dtype":"U8","shape":[4]}}`, four...), "missing data_offsets"},
		{"empty offsets", withLength(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[]}}`, four...), "data_offsets has 0 values"},
		{"metadata number", withLength(`{"__metadata__":{"k":1}}`), `__metadata__ value for key "k" is not a string`},
		{"metadata nested", withLength(`{"__metadata__":{"k":{"x":"y"}}}`), "is not a string"},
		{"metadata not object", withLength(`{"__metadata__":"v"}`), `__metadata__ is string "v", not an object`},
		{"metadata duplicate key", withLength(`{"__metadata__":{"k":"a","k":"b"}}`), `duplicate __metadata__ key "k"`},
		{"long name is cut short", withLength(`{"` + strings.Repeat("n", 5000) + `":1}`), `nnn"...: entry`},
		{"lone high surrogate in a name", withLength(`{"a\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`), `lone UTF-16 surrogate \ud800`},
		{"lone low surrogate in a name", withLength(`{"\udc00b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`), `lone UTF-16 surrogate \udc00`},
		{"surrogates equal to U+FFFD", withLength(`{"\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"\ufffd":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`), "lone UTF-16 surrogate"},
		{"bad escape", withLength(`{"a\x":1}`), "invalid header JSON"},
		{"control character in a name", withLength("{\"a\tb\":1}"), "invalid header JSON"},
		{"trailing comma", withLength(`{` + entry("a", "U8", "[0]", "[0,0]") + `,}`), "invalid header JSON"},
		{"trailing comma in shape", withLength(`{` + entry("a", "U8", "[0,]", "[0,0]") + `}`), "invalid header JSON in shape"},
		{"missing comma", withLength(`{` + entry("a", "U8", "[0]", "[0,0]") + entry("b", "U8", "[0]", "[0,0]") + `}`), "invalid header JSON"},
		{"leading zero", withLength(`{` + entry("a", "U8", "[01]", "[0,1]") + `}`), "invalid header JSON"},
		{"unclosed unknown field", withLength(`{"a":{"x":[1,{"y":2]`), "reading field \"x\""},
		{"unknown field nested past the limit", withLength(`{"a":{"x":` + strings.Repeat("[", maxSkipDepth+1) + strings.Repeat("]", maxSkipDepth+1) + `}}`), "nested more than"},
		{"duplicate among many", withLength(`{` + entry("b", "U8", "[0]", "[0,0]") + `,` + entry("a", "U8", "[0]", "[0,0]") + `,` + entry("b", "U8", "[0]", "[0,0]") + `}`), `duplicate header key "b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(tt.file)
			if err == nil {
				t.Fatalf("Parse succeeded with %d tensors, want error mentioning %q", f.Len(), tt.want)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "safetensors: ") || !strings.Contains(msg, tt.want) {
				t.Errorf("got %q, want an error starting %q mentioning %q", msg, "safetensors: ", tt.want)
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("got %v, want it to wrap ErrFormat", err)
			}
			if len(msg) > 500 {
				t.Errorf("error is %d bytes long, want it kept short", len(msg))
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name string
		file []byte
		want []string
	}{
		{"no tensors", withLength(`{}`), nil},
		{"trailing whitespace", withLength("{} \n\t\r "), nil},
		{"null metadata", withLength(`{"__metadata__":null}`), nil},
		{"unknown fields skipped", withLength(`{"a":{"extra":{"n":[1,2]},"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 7), []string{"a"}},
		{"empty tensors anywhere", withLength(`{`+entry("e", "F32", "[0,3]", "[0,0]")+`,`+entry("a", "U8", "[1]", "[0,1]")+`,`+entry("z", "I64", "[0]", "[1,1]")+`}`, 7), []string{"a", "e", "z"}},
		{"out of name order", withLength(`{`+entry("b", "U8", "[1]", "[0,1]")+`,`+entry("a", "U8", "[1]", "[1,2]")+`}`, 7, 8), []string{"a", "b"}},
		{"only empty tensors", withLength(`{` + entry("a", "U8", "[0]", "[0,0]") + `,` + entry("b", "U8", "[0]", "[0,0]") + `}`), []string{"a", "b"}},
		{"escaped name", withLength(`{"\u00e9\n":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 7), []string{"é\n"}},
		{"every escape", withLength(`{"\"\\\/\b\f\n\r\t\u0041\ud83d\ude00":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 7), []string{"\"\\/\b\f\n\r\tA😀"}},
		{"unknown field nested deep", withLength(`{"a":{"x":`+strings.Repeat(`[{"k":`, 500)+`1`+strings.Repeat(`}]`, 500)+`,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 7), []string{"a"}},
		{"literals in an unknown field", withLength(`{"a":{"x":[true,false,null,-1.5e+3,"s",{}],"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 7), []string{"a"}},
		{"whitespace everywhere", withLength("{ \"a\" : { \"dtype\" : \"U8\" , \"shape\" : [ 1 ] , \"data_offsets\" : [ 0 , 1 ] } }", 7), []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(tt.file)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := f.Names(); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("Names() = %q, want %q", got, tt.want)
			}
		})
	}
}

// A valid header with 100,000 tiny tensors is parsed in one linear pass:
// the old token-by-token decoder took about 200 MB (and seconds on a slow
// machine). BenchmarkParseHeader100k times it.
func TestParseManyTensorsLean(t *testing.T) {
	raw := manyTensors(t, 100_000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f, err := Parse(raw)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if f.Len() != 100_000 {
		t.Fatalf("got %d tensors, want 100000", f.Len())
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 100<<20 {
		t.Errorf("parsing allocated %d MB, want under 100 MB", got>>20)
	}
}
