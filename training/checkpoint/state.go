package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Format and FormatVersion identify state.json. A reader refuses a newer version
// rather than guess at it.
const (
	Format        = "inloop.checkpoint"
	FormatVersion = 1
)

// maxStateSize caps how much of a state.json is read: it holds a few numbers, a
// configuration and a data loader's random state, nowhere near this.
const maxStateSize = 16 << 20

// state is state.json. Config and RNGState are opaque bytes, kept exactly
// (base64 in JSON). Floats that JSON cannot write (NaN, ±Inf) are strings.
type state struct {
	Format           string               `json:"format"`
	Version          int                  `json:"version"`
	Step             int                  `json:"step"`
	Seed             uint64               `json:"seed"`
	Data             dataState            `json:"data"`
	OptimizerScalars map[string]jsonFloat `json:"optimizer_scalars"`
	Metrics          map[string]jsonFloat `json:"metrics"`
	Config           []byte               `json:"config"`
	Files            map[string]fileSum   `json:"files"`
}

type dataState struct {
	Epoch       int    `json:"epoch"`
	Batch       int    `json:"batch"`
	ShuffleSeed uint64 `json:"shuffle_seed"`
	RNGState    []byte `json:"rng_state"`
}

type fileSum struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func newState(c *Checkpoint) *state {
	return &state{
		Format:           Format,
		Version:          FormatVersion,
		Step:             c.Step,
		Seed:             c.Seed,
		Data:             dataState{c.Data.Epoch, c.Data.Batch, c.Data.ShuffleSeed, c.Data.RNGState},
		OptimizerScalars: toJSONFloats(c.Optimizer.Scalars),
		Metrics:          toJSONFloats(c.Metrics),
		Config:           c.Config,
		Files:            map[string]fileSum{},
	}
}

func marshalState(st *state) ([]byte, error) {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("state.json: %w", err)
	}
	return append(b, '\n'), nil
}

// parseState decodes and validates state.json. Every error wraps ErrCorrupt
// except a newer format version, which says so.
func parseState(data []byte) (*state, error) {
	if len(data) > maxStateSize {
		return nil, fmt.Errorf("%w: state.json is over %d bytes", ErrCorrupt, maxStateSize)
	}
	var st state
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("%w: state.json: %v", ErrCorrupt, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: state.json: data after the object", ErrCorrupt)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: state.json: "+format, append([]any{ErrCorrupt}, args...)...)
	}
	switch {
	case st.Format != Format:
		return nil, bad("format %q, want %q", st.Format, Format)
	case st.Version > FormatVersion:
		return nil, fmt.Errorf("checkpoint: state.json: format version %d is newer than this program reads (%d); update Inloop", st.Version, FormatVersion)
	case st.Version != FormatVersion:
		return nil, bad("format version %d", st.Version)
	case st.Step < 0:
		return nil, bad("step %d", st.Step)
	case st.Data.Epoch < 0 || st.Data.Batch < 0:
		return nil, bad("data position epoch %d, batch %d", st.Data.Epoch, st.Data.Batch)
	case len(st.Files) != 2:
		return nil, bad("%d files listed, want %s and %s", len(st.Files), AdaptersFile, OptimizerFile)
	}
	for _, name := range []string{AdaptersFile, OptimizerFile} {
		f, ok := st.Files[name]
		if !ok {
			return nil, bad("%s is not listed", name)
		}
		if f.Size < 8 {
			return nil, bad("%s size %d", name, f.Size)
		}
		if len(f.SHA256) != 64 || !isLowerHex(f.SHA256) {
			return nil, bad("%s sha256 %q", name, f.SHA256)
		}
	}
	return &st, nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// jsonFloat is a float64 that survives JSON even when it is not finite: NaN, +Inf
// and -Inf are written as those strings, every other value as the shortest
// number that reads back to the same bits.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch s {
		case "NaN":
			*f = jsonFloat(math.NaN())
		case "+Inf":
			*f = jsonFloat(math.Inf(1))
		case "-Inf":
			*f = jsonFloat(math.Inf(-1))
		default:
			return fmt.Errorf("number %q", s)
		}
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return fmt.Errorf("number %s is out of range", b)
		}
		return fmt.Errorf("not a number: %s", b)
	}
	*f = jsonFloat(v)
	return nil
}

func toJSONFloats(m map[string]float64) map[string]jsonFloat {
	if m == nil {
		return nil
	}
	out := make(map[string]jsonFloat, len(m))
	for k, v := range m {
		out[k] = jsonFloat(v)
	}
	return out
}

func fromJSONFloats(m map[string]jsonFloat) map[string]float64 {
	if m == nil {
		return nil
	}
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = float64(v)
	}
	return out
}
