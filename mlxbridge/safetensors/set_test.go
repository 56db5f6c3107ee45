package safetensors

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func u8(name string, vals ...byte) Tensor {
	return Tensor{Name: name, DType: DTypeU8, Shape: []int{len(vals)}, Data: vals}
}

// writeModel writes shards (file name -> tensors) and, if index is not
// empty, a model.safetensors.index.json with that text.
func writeModel(t *testing.T, shards map[string][]Tensor, index string) string {
	t.Helper()
	dir := t.TempDir()
	for name, tensors := range shards {
		if err := WriteFile(filepath.Join(dir, name), tensors, nil); err != nil {
			t.Fatal(err)
		}
	}
	if index != "" {
		if err := os.WriteFile(filepath.Join(dir, IndexFileName), []byte(index), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	shard1 = "model-00001-of-00002.safetensors"
	shard2 = "model-00002-of-00002.safetensors"
)

var twoShards = map[string][]Tensor{
	shard1: {u8("embed", 1, 2), u8("layers.0.w", 3)},
	shard2: {u8("layers.1.w", 4, 5, 6), u8("lm_head", 7)},
}

const twoShardIndex = `{"metadata":{"total_size":7},"weight_map":{
	"embed":"` + shard1 + `","layers.0.w":"` + shard1 + `",
	"layers.1.w":"` + shard2 + `","lm_head":"` + shard2 + `"}}`

func TestOpenDirIndexed(t *testing.T) {
	dir := writeModel(t, twoShards, twoShardIndex)
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatalf("OpenDir: %v", err)
	}
	defer s.Close()
	checkTensors(t, s, append(twoShards[shard1], twoShards[shard2]...))
	if got := len(s.Shards()); got != 2 {
		t.Errorf("Shards() has %d files, want 2", got)
	}
	if info, _ := s.Info("lm_head"); info.Begin != 3 || info.End != 4 {
		t.Errorf("Info(lm_head) offsets = [%d,%d], want [3,4] within its shard", info.Begin, info.End)
	}
	if _, err := s.Data("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Data(nope): got %v, want ErrNotFound", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Data("embed"); !errors.Is(err, ErrClosed) {
		t.Errorf("Data after Close: got %v, want ErrClosed", err)
	}
}

func TestOpenDirWithoutIndex(t *testing.T) {
	t.Run("model.safetensors wins", func(t *testing.T) {
		dir := writeModel(t, map[string][]Tensor{SingleFileName: {u8("a", 1)}, "other.safetensors": {u8("a", 2)}}, "")
		s, err := OpenDir(dir)
		if err != nil {
			t.Fatalf("OpenDir: %v", err)
		}
		defer s.Close()
		checkTensors(t, s, []Tensor{u8("a", 1)})
	})
	t.Run("all safetensors files", func(t *testing.T) {
		dir := writeModel(t, twoShards, "")
		os.WriteFile(filepath.Join(dir, "._"+shard1), []byte("resource fork"), 0o644)
		s, err := OpenDir(dir)
		if err != nil {
			t.Fatalf("OpenDir: %v", err)
		}
		defer s.Close()
		checkTensors(t, s, append(twoShards[shard1], twoShards[shard2]...))
	})
	t.Run("empty folder", func(t *testing.T) {
		_, err := OpenDir(t.TempDir())
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("got %v, want ErrNotExist", err)
		}
	})
}

func TestOpenDirRejects(t *testing.T) {
	tests := []struct {
		name   string
		shards map[string][]Tensor
		index  string
		want   string
		is     error
	}{
		{"missing shard", map[string][]Tensor{shard1: twoShards[shard1]}, twoShardIndex, shard2, fs.ErrNotExist},
		{"traversal", twoShards, `{"weight_map":{"embed":"../x.safetensors"}}`, `shard name "../x.safetensors" is not a plain file name`, ErrFormat},
		{"absolute", twoShards, `{"weight_map":{"embed":"/etc/x.safetensors"}}`, "not a plain file name", ErrFormat},
		{"backslash", twoShards, `{"weight_map":{"embed":"..\\x.safetensors"}}`, "not a plain file name", ErrFormat},
		{"dot dot", twoShards, `{"weight_map":{"embed":".."}}`, "not a plain file name", ErrFormat},
		{"empty shard name", twoShards, `{"weight_map":{"embed":""}}`, "not a plain file name", ErrFormat},
		{"tensor missing from shard", twoShards, `{"weight_map":{"ghost":"` + shard1 + `"}}`, `tensor "ghost": listed in model.safetensors.index.json but missing from the shard`, ErrFormat},
		{"tensor in other shard", twoShards, `{"weight_map":{"lm_head":"` + shard1 + `","embed":"` + shard2 + `"}}`, "puts it in", ErrFormat},
		{"duplicate across shards", map[string][]Tensor{shard1: {u8("w", 1)}, shard2: {u8("v", 3), u8("w", 2)}},
			`{"weight_map":{"w":"` + shard1 + `","v":"` + shard2 + `"}}`, `tensor "w": in both ` + shard1 + ` and ` + shard2, ErrFormat},
		{"duplicate across files without index", map[string][]Tensor{"a.safetensors": {u8("w", 1)}, "b.safetensors": {u8("w", 2)}}, "", `tensor "w": in both a.safetensors and b.safetensors`, ErrFormat},
		{"duplicate in weight_map", twoShards, `{"weight_map":{"embed":"` + shard1 + `","embed":"` + shard2 + `"}}`, "listed twice in weight_map", ErrFormat},
		{"no weight_map", twoShards, `{"metadata":{}}`, "no weight_map", ErrFormat},
		{"weight_map value not string", twoShards, `{"weight_map":{"embed":1}}`, "not a file name", ErrFormat},
		{"index not json", twoShards, `{"weight_map":`, "invalid header JSON", ErrFormat},
		{"bad shard", map[string][]Tensor{shard1: twoShards[shard1], shard2: nil}, twoShardIndex, "missing from the shard", ErrFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeModel(t, tt.shards, tt.index)
			s, err := OpenDir(dir)
			if err == nil {
				s.Close()
				t.Fatalf("OpenDir succeeded, want error mentioning %q", tt.want)
			}
			if !strings.HasPrefix(err.Error(), "safetensors: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want an error mentioning %q", err, tt.want)
			}
			if !errors.Is(err, tt.is) {
				t.Errorf("got %v, want errors.Is %v", err, tt.is)
			}
		})
	}
}

func TestOpenDirCorruptShard(t *testing.T) {
	dir := writeModel(t, twoShards, twoShardIndex)
	if err := os.WriteFile(filepath.Join(dir, shard2), []byte("not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenDir(dir)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), shard2) {
		t.Errorf("got %v, want ErrFormat naming %s", err, shard2)
	}
}
