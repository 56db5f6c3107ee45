package checkpoint

import (
	"bytes"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

// testdata/state-v1.json was written by Save; version 1 must stay readable.
func TestStateV1(t *testing.T) {
	data, err := os.ReadFile("testdata/state-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseState(data)
	if err != nil {
		t.Fatal(err)
	}
	if st.Step != 1200 || st.Seed != 0xfedcba9876543210 || st.Data.Epoch != 120 || st.Data.ShuffleSeed != 1<<63+1200 || string(st.Data.RNGState) != "pcg:0123" {
		t.Errorf("got %+v", st)
	}
	if !strings.HasPrefix(string(st.Config), "{\n  \"iters\": 1000") {
		t.Errorf("config %q", st.Config)
	}
	m := fromJSONFloats(st.Metrics)
	if !math.IsNaN(m["nan"]) || !math.IsInf(m["val_loss"], 1) || m["tokens"] != 3.0000012e9 {
		t.Errorf("metrics %v", m)
	}
	if st.Files[AdaptersFile].Size != 3312 {
		t.Errorf("files %v", st.Files)
	}
}

func TestParseStateRejects(t *testing.T) {
	good, err := os.ReadFile("testdata/state-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	edit := func(old, new string) string { return strings.Replace(string(good), old, new, 1) }
	cases := map[string]string{
		"empty":            "",
		"not an object":    "[]",
		"trailing data":    string(good) + "{}",
		"negative step":    edit(`"step": 1200,`, `"step": -1,`),
		"fractional step":  edit(`"step": 1200,`, `"step": 1.5,`),
		"negative epoch":   edit(`"epoch": 120`, `"epoch": -1`),
		"seed overflow":    edit(`"seed": 18364758544493064720`, `"seed": 18446744073709551616`),
		"bad metric":       edit(`"NaN"`, `"nan"`),
		"null metric":      edit(`"NaN"`, `null`),
		"huge metric":      edit(`"NaN"`, `1e999`),
		"bad base64":       edit(`"cGNnOjAxMjM="`, `"!!"`),
		"file missing":     edit(`"adapters.safetensors"`, `"other.safetensors"`),
		"bad hash":         edit(`"b9e6b9fe`, `"B9E6B9FE`),
		"short hash":       edit(`"b9e6b9fe`, `"`),
		"negative size":    edit(`"size": 3312`, `"size": -1`),
		"missing format":   edit(`"format": "inloop.checkpoint",`, ``),
		"wrong type":       edit(`"batch": 0`, `"batch": "0"`),
		"too big":          string(good) + strings.Repeat(" ", maxStateSize),
		"version as float": edit(`"version": 1`, `"version": 1.0`),
	}
	for name, data := range cases {
		if _, err := parseState([]byte(data)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", name, err)
		}
	}
}

// FuzzState feeds arbitrary bytes to the state.json parser: it must never panic,
// and whatever it accepts must write back to JSON that parses to the same state.
func FuzzState(f *testing.F) {
	good, err := os.ReadFile("testdata/state-v1.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"format":"inloop.checkpoint","version":1,"step":0,"files":{"adapters.safetensors":{"size":16,"sha256":"` + strings.Repeat("0", 64) + `"},"optimizer.safetensors":{"size":16,"sha256":"` + strings.Repeat("a", 64) + `"}},"metrics":{"x":"-Inf","y":-0}}`))
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := parseState(data)
		if err != nil {
			return
		}
		out, err := marshalState(st)
		if err != nil {
			t.Fatalf("accepted state does not marshal: %v", err)
		}
		st2, err := parseState(out)
		if err != nil {
			t.Fatalf("re-parse of\n%s\nfailed: %v", out, err)
		}
		out2, err := marshalState(st2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the state:\n%s\n%s", out, out2)
		}
	})
}
