package safetensors

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/inloop/inloop/internal/capped"
)

// The names Hugging Face gives a sharded model's index and an unsharded
// model's weights.
const (
	IndexFileName  = "model.safetensors.index.json"
	SingleFileName = "model.safetensors"
	maxIndexSize   = 64 << 20 // real indexes are well under a megabyte
)

// Set is a model's weights spread over one or more safetensors files in a
// folder, seen as one collection of uniquely named tensors.
type Set struct {
	dir   string
	files []*File
	owner map[string]*File // tensor name -> the shard holding it
	names []string         // sorted
}

// OpenDir opens the model in dir: the shards named by
// model.safetensors.index.json if there is one, else model.safetensors,
// else every *.safetensors file in dir. Every shard is validated; the index
// may name only plain file names in dir, every tensor it lists must be in
// the shard it names, and no tensor may appear in two shards.
func OpenDir(dir string) (*Set, error) {
	shards, weightMap, err := findShards(dir)
	if err != nil {
		return nil, err
	}
	s := &Set{dir: dir, owner: make(map[string]*File)}
	if err := s.open(shards, weightMap); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Set) open(shards []string, weightMap map[string]string) error {
	for _, shard := range shards {
		f, err := Open(filepath.Join(s.dir, shard))
		if err != nil {
			return err
		}
		s.files = append(s.files, f)
		for _, name := range f.names {
			if other, dup := s.owner[name]; dup {
				return &FormatError{Path: s.dir, Tensor: name, Problem: fmt.Sprintf("in both %s and %s", filepath.Base(other.path), shard)}
			}
			s.owner[name] = f
		}
	}
	for _, name := range slices.Sorted(maps.Keys(weightMap)) {
		want := weightMap[name]
		f, ok := s.owner[name]
		if !ok {
			return &FormatError{Path: filepath.Join(s.dir, want), Tensor: name, Problem: "listed in " + IndexFileName + " but missing from the shard"}
		}
		if got := filepath.Base(f.path); got != want {
			return &FormatError{Path: s.dir, Tensor: name, Problem: fmt.Sprintf("%s puts it in %s, but it is in %s", IndexFileName, want, got)}
		}
	}
	s.names = slices.Sorted(maps.Keys(s.owner))
	return nil
}

// findShards lists the shard files to open, and the index's weight map
// when there is an index.
func findShards(dir string) ([]string, map[string]string, error) {
	indexPath := filepath.Join(dir, IndexFileName)
	raw, err := capped.ReadFile(indexPath, maxIndexSize)
	if err == nil {
		weightMap, err := parseIndex(raw, indexPath)
		if err != nil {
			return nil, nil, err
		}
		shards := slices.Sorted(maps.Values(weightMap))
		return slices.Compact(shards), weightMap, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, SingleFileName)); err == nil {
		return []string{SingleFileName}, nil, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	var shards []string
	for _, e := range entries { // ReadDir sorts by name
		// Hidden files are skipped: macOS leaves "._model.safetensors" resource forks on other file systems.
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".safetensors") && !strings.HasPrefix(e.Name(), ".") {
			shards = append(shards, e.Name())
		}
	}
	if len(shards) == 0 {
		return nil, nil, fmt.Errorf("safetensors: %s: no .safetensors files: %w", dir, fs.ErrNotExist)
	}
	return shards, nil, nil
}

// parseIndex reads the weight_map of a model.safetensors.index.json,
// refusing duplicate tensors and shard names that could leave the folder.
// The index's own "metadata" (total_size and the like) is not needed.
func parseIndex(raw []byte, path string) (map[string]string, error) {
	p := parser{path: path}
	if !utf8.Valid(raw) {
		return nil, p.errorf("", nil, "index is not valid UTF-8")
	}
	sc := &scanner{b: raw}
	if !sc.delim('{') {
		return nil, p.delimError(sc, "", "index", '{')
	}
	var weightMap map[string]string
	for first := true; ; first = false {
		more, err := sc.next('}', first)
		if err != nil {
			return nil, p.errorf("", err, "invalid header JSON in index")
		}
		if !more {
			break
		}
		key, err := p.key(sc, "")
		if err != nil {
			return nil, err
		}
		if key != "weight_map" {
			if err := sc.skip(); err != nil {
				return nil, p.errorf("", err, "reading %s", quoteName(key))
			}
			continue
		}
		if weightMap != nil {
			return nil, p.errorf("", nil, "duplicate weight_map")
		}
		if !sc.delim('{') {
			return nil, p.delimError(sc, "", "weight_map", '{')
		}
		weightMap = make(map[string]string)
		for first := true; ; first = false {
			more, err := sc.next('}', first)
			if err != nil {
				return nil, p.errorf("", err, "invalid header JSON in weight_map")
			}
			if !more {
				break
			}
			name, err := p.key(sc, "")
			if err != nil {
				return nil, err
			}
			if sc.peek() != '"' {
				return nil, p.errorf(name, nil, "weight_map value is %s, not a file name", sc.describe())
			}
			shard, err := sc.str()
			switch {
			case err != nil:
				return nil, p.errorf(name, err, "reading weight_map entry")
			case !validShardName(shard):
				return nil, p.errorf(name, nil, "shard name %s is not a plain file name in the model folder", quoteName(shard))
			}
			if prev, dup := weightMap[name]; dup {
				return nil, p.errorf(name, nil, "listed twice in weight_map (%s and %s)", quoteName(prev), quoteName(shard))
			}
			weightMap[name] = shard
		}
	}
	if !sc.atEnd() {
		return nil, p.errorf("", sc.syntax("after the index object"), "unexpected data after the index object")
	}
	if weightMap == nil {
		return nil, p.errorf("", nil, "index has no weight_map")
	}
	return weightMap, nil
}

// validShardName accepts only a plain file name: no separators of either
// platform, nothing with "..", nothing absolute or otherwise non-local.
func validShardName(name string) bool {
	return name != "" && !strings.ContainsAny(name, `/\`) && !strings.Contains(name, "..") && filepath.IsLocal(name)
}

// Names lists every tensor in every shard, sorted.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Len is the number of tensors.
func (s *Set) Len() int { return len(s.names) }

// Info describes the named tensor; its offsets are into its own shard.
func (s *Set) Info(name string) (TensorInfo, bool) {
	f, ok := s.owner[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Info(name)
}

// Data is the named tensor's raw bytes, a view valid until Close.
func (s *Set) Data(name string) ([]byte, error) {
	f, ok := s.owner[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s in %s", ErrNotFound, quoteName(name), s.dir)
	}
	return f.Data(name)
}

// Shards lists the paths of the opened files, in the order opened.
func (s *Set) Shards() []string {
	paths := make([]string, len(s.files))
	for i, f := range s.files {
		paths[i] = f.path
	}
	return paths
}

// Close closes every shard. Closing twice is harmless.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
