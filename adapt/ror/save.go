package ror

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/inloop/inloop/internal/atomicfile"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/decide"
	"github.com/inloop/inloop/training/lora"
)

// Save writes the current version as a decision-model folder in decide's
// layout, which decide.Load reads: the model the Learner was given (task,
// calibration, split, metadata) with the current head and adapter. Like
// decide's own Save it fills a temporary folder beside dir and renames it into
// place, so dir holds the old version or the new one, never a mixture.
func (l *Learner) Save(dir string) (err error) {
	l.busy.Lock()
	defer l.busy.Unlock()
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("ror: save: %w", err)
	}
	tmp, err := atomicfile.MkdirTemp(parent, ".tmp-ror-"+filepath.Base(dir)+"-")
	if err != nil {
		return fmt.Errorf("ror: save: %w", err)
	}
	defer os.RemoveAll(tmp)
	defer func() {
		if err != nil {
			err = fmt.Errorf("ror: save %s: %w", dir, err)
		}
	}()
	inner := filepath.Join(tmp, "model")
	if err := l.m.Save(inner); err != nil {
		return err
	}
	v := l.current
	if err := mx.SaveSafetensors(filepath.Join(inner, decide.HeadFile), v.head, map[string]string{"format": "inloop-decide"}); err != nil {
		return err
	}
	if l.m.Meta.Adapter {
		st := v.adapter.Adapters()
		if len(st) == 0 || l.adapterCF == nil {
			return errors.New("the version has no adapter to save")
		}
		if err := lora.SaveArrays(inner, st[len(st)-1].Params(), l.adapterCF); err != nil {
			return err
		}
	}
	if err := atomicfile.SyncDir(inner); err != nil {
		return err
	}
	return atomicfile.ReplaceDir(inner, dir)
}
