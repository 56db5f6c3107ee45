package decide

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	"github.com/inloop/inloop/internal/atomicfile"
	"github.com/inloop/inloop/internal/capped"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/lora"
)

// A saved decision model is a folder:
//
//	adapters.safetensors, adapter_config.json   the decision adapter, in mlx-lm's layout (absent for a head-only model)
//	head.safetensors                             the head (head.<question>.rows / .marker / .bias)
//	task.json                                    the task, normalized
//	calibration.json                             temperatures, thresholds, held-out figures per question
//	split.json                                   the held-out split (line numbers of the rows file)
//	decide.json                                  the format, prompt layout, marker and the backbone it needs
const (
	HeadFile        = "head.safetensors"
	TaskFile        = "task.json"
	CalibrationFile = "calibration.json"
	SplitFile       = "split.json"
	MetaFile        = "decide.json"
)

// FormatVersion is decide.json's format.
const FormatVersion = 1

// ErrBaseMismatch is returned when a saved decision model is loaded over a
// backbone other than the one it was trained on.
var ErrBaseMismatch = errors.New("decide: the decision model was trained on another backbone")

// maxJSONFile caps the JSON files of a saved model (a split of a million rows
// fits).
const maxJSONFile = 64 << 20

// Save writes m into dir atomically: everything goes into a hidden temporary
// folder beside dir, is synced, and replaces dir in one rename (an old dir is
// moved aside first and then removed).
func (m *Model) Save(dir string) (err error) {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("decide: save: %w", err)
	}
	tmp, err := atomicfile.MkdirTemp(parent, ".tmp-"+filepath.Base(dir)+"-")
	if err != nil {
		return fmt.Errorf("decide: save: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
			err = fmt.Errorf("decide: save %s: %w", dir, err)
		}
	}()
	if m.Meta.Adapter {
		top := m.model.TopAdapter()
		if top == nil || m.adapterCfg == nil {
			return errors.New("the model has no adapter to save")
		}
		if err := lora.SaveArrays(tmp, top.Params(), m.adapterCfg); err != nil {
			return err
		}
	}
	if err := mx.SaveSafetensors(filepath.Join(tmp, HeadFile), m.head, map[string]string{"format": "inloop-decide"}); err != nil {
		return err
	}
	taskJSON, err := m.Task.JSON()
	if err != nil {
		return err
	}
	files := map[string]any{CalibrationFile: m.Calibration, MetaFile: m.Meta}
	if m.Split != nil {
		files[SplitFile] = m.Split
	}
	if err := atomicfile.WriteFile(filepath.Join(tmp, TaskFile), append(taskJSON, '\n'), 0o644); err != nil {
		return err
	}
	for name, v := range files {
		if err := writeJSON(filepath.Join(tmp, name), v); err != nil {
			return err
		}
	}
	return atomicfile.ReplaceDir(tmp, dir)
}

// SaveCalibration rewrites only calibration.json in dir (after a threshold
// changed).
func (m *Model) SaveCalibration(dir string) error {
	if err := writeJSON(filepath.Join(dir, CalibrationFile), m.Calibration); err != nil {
		return fmt.Errorf("decide: %w", err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(data, '\n'), 0o644)
}

func readJSON(dir, name string, v any) error {
	data, err := capped.ReadFile(filepath.Join(dir, name), maxJSONFile)
	if err != nil {
		return fmt.Errorf("decide: %w", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decide: %s: %w", name, err)
	}
	return nil
}

// Load reads the decision model saved in dir over base (which it leaves alone:
// the adapter goes on a fork) with base's tokenizer.
func Load(dir string, base *inference.Model, tok *tokenizer.Tokenizer) (*Model, error) {
	var meta Meta
	if err := readJSON(dir, MetaFile, &meta); err != nil {
		return nil, err
	}
	if meta.Format != FormatVersion {
		return nil, fmt.Errorf("decide: %s: format %d, this Inloop reads %d", dir, meta.Format, FormatVersion)
	}
	if meta.PromptVersion != PromptVersion {
		return nil, fmt.Errorf("decide: %s: prompt layout %d, this Inloop writes %d; train the model again", dir, meta.PromptVersion, PromptVersion)
	}
	if got := baseOf(base); got.ModelType != meta.Base.ModelType || got.HiddenSize != meta.Base.HiddenSize ||
		got.VocabSize != meta.Base.VocabSize || got.Layers != meta.Base.Layers {
		return nil, fmt.Errorf("%w: it needs %s (hidden %d, %d layers, vocabulary %d), not %s (hidden %d, %d layers, vocabulary %d)", ErrBaseMismatch,
			meta.Base.ModelType, meta.Base.HiddenSize, meta.Base.Layers, meta.Base.VocabSize, got.ModelType, got.HiddenSize, got.Layers, got.VocabSize)
	}
	raw, err := capped.ReadFile(filepath.Join(dir, TaskFile), MaxTaskBytes)
	if err != nil {
		return nil, fmt.Errorf("decide: %w", err)
	}
	task, err := ParseTask(raw)
	if err != nil {
		return nil, err
	}
	m := &Model{Task: task, Meta: meta, Calibration: &Calibration{}}
	if err := readJSON(dir, CalibrationFile, m.Calibration); err != nil {
		return nil, err
	}
	var split Split
	switch err := readJSON(dir, SplitFile, &split); {
	case err == nil:
		m.Split = &split
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	if m.enc, err = NewEncoder(tok, task, meta.Marker, meta.MaxSeqLength); err != nil {
		return nil, err
	}
	m.model = base.Fork()
	if meta.Adapter {
		a, ac, err := inference.ReadAdapter(m.model, dir)
		if err != nil {
			return nil, fmt.Errorf("decide: %w", err)
		}
		m.adapterCfg = ac
		if _, err := m.model.PushAdapter(a); err != nil {
			return nil, fmt.Errorf("decide: %w", err)
		}
	}
	head, _, err := mx.LoadSafetensors(base.Backend(), filepath.Join(dir, HeadFile))
	if err != nil {
		return nil, fmt.Errorf("decide: %w", err)
	}
	for n, a := range head {
		head[n] = mx.AsType(a, mx.Float32)
	}
	if err := checkHead(head, task, base.Config().HiddenSize); err != nil {
		return nil, err
	}
	m.head = head
	return m, nil
}
