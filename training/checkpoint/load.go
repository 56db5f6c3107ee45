package checkpoint

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/inloop/inloop/internal/atomicfile"
	"github.com/inloop/inloop/internal/capped"
	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// Load reads the checkpoint in dir (a folder Save wrote, e.g. the path Latest
// returns) onto the default backend.
func Load(dir string) (*Checkpoint, error) { return LoadOn(mx.Default(), dir) }

// LoadOn reads the checkpoint in dir onto backend b. It verifies everything
// Verify does; arrays come back in the dtypes they were saved in.
func LoadOn(b mx.Backend, dir string) (*Checkpoint, error) {
	st, files, err := open(dir)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{
		Step:      st.Step,
		Optimizer: OptimizerState{Scalars: fromJSONFloats(st.OptimizerScalars)},
		Data:      DataPosition{st.Data.Epoch, st.Data.Batch, st.Data.ShuffleSeed, st.Data.RNGState},
		Seed:      st.Seed,
		Config:    st.Config,
		Metrics:   fromJSONFloats(st.Metrics),
	}
	if c.Adapters, err = arrays(b, files[AdaptersFile]); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", filepath.Join(dir, AdaptersFile), err)
	}
	if c.Optimizer.Arrays, err = arrays(b, files[OptimizerFile]); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", filepath.Join(dir, OptimizerFile), err)
	}
	return c, nil
}

func arrays(b mx.Backend, f *safetensors.File) (map[string]*mx.Array, error) {
	out := make(map[string]*mx.Array, f.Len())
	for _, name := range f.Names() {
		a, err := mx.LoadTensor(b, f, name)
		if err != nil {
			return nil, err
		}
		out[name] = a
	}
	return out, nil
}

// Verify checks the checkpoint in dir without building arrays: state.json parses
// and names the folder's step, and both tensor files have the recorded size and
// SHA-256 and valid safetensors headers. Damage is reported as ErrCorrupt.
func Verify(dir string) error {
	_, _, err := open(dir)
	return err
}

// open reads and checks a checkpoint folder, returning its state and its two
// tensor files parsed from memory.
func open(dir string) (*state, map[string]*safetensors.File, error) {
	data, err := capped.ReadFile(filepath.Join(dir, StateFile), maxStateSize)
	if err != nil {
		return nil, nil, wrapRead(dir, err)
	}
	st, err := parseState(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", dir, err)
	}
	if step, ok := parseDirName(filepath.Base(dir)); ok && step != st.Step {
		return nil, nil, fmt.Errorf("%w: %s: state.json says step %d", ErrCorrupt, dir, st.Step)
	}
	files := map[string]*safetensors.File{}
	for _, name := range []string{AdaptersFile, OptimizerFile} {
		want := st.Files[name]
		path := filepath.Join(dir, name)
		buf, err := capped.ReadFile(path, want.Size)
		if err != nil {
			return nil, nil, wrapRead(dir, err)
		}
		if int64(len(buf)) != want.Size {
			return nil, nil, fmt.Errorf("%w: %s is %d bytes, state.json says %d", ErrCorrupt, path, len(buf), want.Size)
		}
		if sum := sha256.Sum256(buf); hex.EncodeToString(sum[:]) != want.SHA256 {
			return nil, nil, fmt.Errorf("%w: %s does not match its SHA-256 in state.json", ErrCorrupt, path)
		}
		f, err := safetensors.Parse(buf)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
		}
		files[name] = f
	}
	return st, files, nil
}

// wrapRead marks a missing file, or one larger than state.json allows, as
// corruption (a folder without its files, or with overgrown ones, is a damaged
// checkpoint) and passes other I/O errors on as they are.
func wrapRead(dir string, err error) error {
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, capped.ErrTooLarge) {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, dir, err)
	}
	return fmt.Errorf("checkpoint: %w", err)
}

// Entry is a checkpoint folder found in a run directory.
type Entry struct {
	Path string
	Step int
}

// List returns the checkpoint folders of a run, newest first, without checking
// them. Temporary folders of unfinished saves are not listed. A run without
// checkpoints gives an empty list.
func List(runDir string) ([]Entry, error) {
	root := filepath.Join(runDir, Subdir)
	des, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var out []Entry
	for _, de := range des {
		if step, ok := parseDirName(de.Name()); ok && de.IsDir() {
			out = append(out, Entry{filepath.Join(root, de.Name()), step})
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(b.Step, a.Step) })
	return out, nil
}

// Latest returns the newest checkpoint of a run that passes Verify, skipping
// damaged ones and unfinished saves. With none, the error wraps ErrNoCheckpoint
// and says why each candidate was skipped.
func Latest(runDir string) (path string, step int, err error) {
	entries, err := List(runDir)
	if err != nil {
		return "", 0, err
	}
	var skipped []error
	for _, e := range entries {
		if err := Verify(e.Path); err != nil {
			skipped = append(skipped, err)
			continue
		}
		return e.Path, e.Step, nil
	}
	if len(skipped) == 0 {
		return "", 0, fmt.Errorf("%w in %s", ErrNoCheckpoint, runDir)
	}
	return "", 0, fmt.Errorf("%w in %s: %w", ErrNoCheckpoint, runDir, errors.Join(skipped...))
}

// Prune keeps the keep newest good checkpoints of a run and deletes the older
// ones, good or damaged, and the leftovers of interrupted saves. Damaged
// checkpoints newer than the oldest one kept are left for Save to replace. keep
// must be at least 1: Prune never leaves a run without its latest good
// checkpoint. It must not run while a Save to the same run is in progress.
func Prune(runDir string, keep int) error {
	if keep < 1 {
		return fmt.Errorf("checkpoint: prune: keep %d, want at least 1", keep)
	}
	entries, err := List(runDir)
	if err != nil {
		return err
	}
	root := filepath.Join(runDir, Subdir)
	var doomed []string
	good := 0
	for _, e := range entries {
		if good < keep {
			if Verify(e.Path) == nil {
				good++
			}
			continue
		}
		doomed = append(doomed, e.Path)
	}
	des, _ := os.ReadDir(root)
	for _, de := range des {
		if n := de.Name(); strings.HasPrefix(n, ".tmp-step-") || strings.HasPrefix(n, ".old-step-") {
			doomed = append(doomed, filepath.Join(root, n))
		}
	}
	var errs []error
	for _, dir := range doomed {
		trash := dir
		if !strings.HasPrefix(filepath.Base(dir), ".") {
			// Hide it first, so a crash halfway through the deletion never leaves
			// a listed checkpoint with files missing.
			trash = trashName(root, dir)
			if err := os.Rename(dir, trash); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := os.RemoveAll(trash); err != nil {
			errs = append(errs, err)
		}
	}
	if len(doomed) > 0 {
		if err := atomicfile.SyncDir(root); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checkpoint: prune %s: %w", runDir, err)
	}
	return nil
}
