// Package checkpoint saves and restores everything a training run needs to
// continue after it is killed: the adapter weights, the optimizer's state, where
// the run was in its data, its seeds, its configuration and a metrics summary.
//
// A run directory holds its checkpoints as
//
//	runDir/checkpoints/step-000100/adapters.safetensors   adapter weights, mlx-lm's names
//	                              /optimizer.safetensors  optimizer state arrays
//	                              /state.json             everything else, with the files' sizes and SHA-256
//
// Save writes a checkpoint into a hidden temporary folder next to the others,
// syncs every file and the folder, and renames it into place, so a crash at any
// moment leaves either the previous checkpoints alone or the new one complete.
// state.json is written last and records the size and hash of both tensor files,
// so Load and Latest tell a damaged checkpoint from a good one; Latest skips
// damaged ones and returns the newest good one.
package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/inloop/inloop/internal/atomicfile"
	mx "github.com/inloop/inloop/mlxbridge"
)

// File names inside a checkpoint folder.
const (
	AdaptersFile  = "adapters.safetensors"
	OptimizerFile = "optimizer.safetensors"
	StateFile     = "state.json"
)

// Subdir is the folder of a run directory that holds its checkpoints.
const Subdir = "checkpoints"

var (
	// ErrNoCheckpoint: a run directory holds no usable checkpoint.
	ErrNoCheckpoint = errors.New("checkpoint: no usable checkpoint")
	// ErrCorrupt: a checkpoint folder is incomplete or damaged.
	ErrCorrupt = errors.New("checkpoint: corrupt")
)

// Checkpoint is one resumable point of a training run.
type Checkpoint struct {
	Step      int                  // optimizer updates applied so far
	Adapters  map[string]*mx.Array // trainable weights by name ("model.layers.0.self_attn.q_proj.lora_a")
	Optimizer OptimizerState
	Data      DataPosition
	Seed      uint64             // the run's seed
	Config    []byte             // the run's training configuration, stored as opaque bytes
	Metrics   map[string]float64 // a summary: last train/validation loss, tokens seen, …; NaN and ±Inf are kept
}

// OptimizerState is an optimizer's exported state. It has the same fields as
// optim.State, so either converts to the other: checkpoint.OptimizerState(opt.State()).
type OptimizerState struct {
	Arrays  map[string]*mx.Array
	Scalars map[string]float64
}

// DataPosition says where in its data a run stands, so that a resumed run sees
// the batches an uninterrupted one would have.
type DataPosition struct {
	Epoch       int    // epochs completed
	Batch       int    // batches consumed in the current epoch
	ShuffleSeed uint64 // seed of the current epoch's order
	RNGState    []byte // the data loader's random state (e.g. a marshalled PCG), opaque
}

// Dir is the folder Save writes the checkpoint of step into.
func Dir(runDir string, step int) string {
	return filepath.Join(runDir, Subdir, dirName(step))
}

func dirName(step int) string { return fmt.Sprintf("step-%06d", step) }

// parseDirName returns the step of a folder name Save would write, and false for
// anything else (temporary folders, other files, non-canonical numbers).
func parseDirName(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "step-")
	if !ok || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || dirName(n) != name {
		return 0, false
	}
	return n, true
}

// Save writes c as runDir/checkpoints/step-NNNNNN, atomically: into a temporary
// folder, every file synced, then renamed into place and the parent synced. A
// checkpoint already there for the same step (from a run that went back to an
// earlier checkpoint) is replaced: it is renamed aside, then the new one into
// place, so a crash between the two renames leaves that step absent and the
// earlier checkpoints as they were.
func Save(runDir string, c *Checkpoint) (err error) {
	if err := validate(c); err != nil {
		return err
	}
	root := filepath.Join(runDir, Subdir)
	if _, statErr := os.Stat(root); statErr != nil {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if err := atomicfile.SyncDir(runDir); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	final := Dir(runDir, c.Step)
	tmp, err := atomicfile.MkdirTemp(root, ".tmp-"+dirName(c.Step)+"-")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
			err = fmt.Errorf("checkpoint: save step %d in %s: %w", c.Step, runDir, err)
		}
	}()
	meta := map[string]string{"format": "mlx"} // what mlx writes; mlx-lm loads adapters.safetensors as is
	if err := mx.SaveSafetensors(filepath.Join(tmp, AdaptersFile), c.Adapters, meta); err != nil {
		return err
	}
	if err := mx.SaveSafetensors(filepath.Join(tmp, OptimizerFile), c.Optimizer.Arrays, meta); err != nil {
		return err
	}
	st := newState(c)
	for _, name := range []string{AdaptersFile, OptimizerFile} {
		sum, err := hashFile(filepath.Join(tmp, name))
		if err != nil {
			return err
		}
		st.Files[name] = sum
	}
	data, err := marshalState(st)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(tmp, StateFile), data, 0o644); err != nil {
		return err
	}
	// Every write above synced its file and tmp, so tmp is whole on disk
	// before it is renamed into place.
	var old string
	if _, err := os.Lstat(final); err == nil {
		old = trashName(root, final)
		if err := os.Rename(final, old); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(root); err != nil {
		return err
	}
	if old != "" {
		os.RemoveAll(old) // best effort: a leftover is hidden and Prune removes it
	}
	return nil
}

func validate(c *Checkpoint) error {
	switch {
	case c == nil:
		return errors.New("checkpoint: save: nil checkpoint")
	case c.Step < 0:
		return fmt.Errorf("checkpoint: save: step %d < 0", c.Step)
	case len(c.Adapters) == 0:
		return errors.New("checkpoint: save: no adapter weights")
	case c.Data.Epoch < 0 || c.Data.Batch < 0:
		return fmt.Errorf("checkpoint: save: data position epoch %d, batch %d", c.Data.Epoch, c.Data.Batch)
	}
	return nil
}

// trashName is a hidden, unused name in root that a folder is renamed to before
// it is deleted, so that it disappears from view in one atomic step.
func trashName(root, dir string) string {
	return filepath.Join(root, fmt.Sprintf(".old-%s-%d-%d", filepath.Base(dir), os.Getpid(), time.Now().UnixNano()))
}

func hashFile(path string) (fileSum, error) {
	f, err := os.Open(path)
	if err != nil {
		return fileSum{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fileSum{}, err
	}
	return fileSum{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
