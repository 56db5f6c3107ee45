package checkpoint

import (
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Each case damages the newest of three good checkpoints the way a crash, a full
// disk or a bad sector would; Latest must fall back to step 200, and Load of the
// damaged one must fail with ErrCorrupt and say why.
func TestLatestSkipsDamage(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, run, dir string)
		want   string // in Load's error; empty when the damaged folder is not a checkpoint at all
	}{
		{"temp folder of an unfinished save", func(t *testing.T, run, dir string) {
			// The save of 300 died before its rename: only a hidden folder with some files.
			os.RemoveAll(dir)
			tmp := filepath.Join(run, Subdir, ".tmp-step-000300-123456")
			os.MkdirAll(tmp, 0o755)
			os.WriteFile(filepath.Join(tmp, AdaptersFile), []byte("partial"), 0o644)
		}, ""},
		{"truncated safetensors", func(t *testing.T, run, dir string) {
			truncate(t, filepath.Join(dir, OptimizerFile), 100)
		}, "bytes, state.json says"},
		{"truncated state.json", func(t *testing.T, run, dir string) {
			truncate(t, filepath.Join(dir, StateFile), 40)
		}, "state.json"},
		{"state.json not JSON", func(t *testing.T, run, dir string) {
			os.WriteFile(filepath.Join(dir, StateFile), []byte("{\"format\": \"inloop.checkpoint\", oops"), 0o644)
		}, "invalid character"},
		{"state.json missing", func(t *testing.T, run, dir string) {
			os.Remove(filepath.Join(dir, StateFile))
		}, "no such file"},
		{"adapters missing", func(t *testing.T, run, dir string) {
			os.Remove(filepath.Join(dir, AdaptersFile))
		}, "no such file"},
		{"flipped bit", func(t *testing.T, run, dir string) {
			path := filepath.Join(dir, AdaptersFile)
			b, _ := os.ReadFile(path)
			b[len(b)-3] ^= 0x10
			os.WriteFile(path, b, 0o644)
		}, "SHA-256"},
		{"step does not match the folder", func(t *testing.T, run, dir string) {
			editState(t, dir, `"step": 300`, `"step": 250`)
		}, "says step 250"},
		{"unknown format", func(t *testing.T, run, dir string) {
			editState(t, dir, `"format": "inloop.checkpoint"`, `"format": "other"`)
		}, `format "other"`},
		{"old format version", func(t *testing.T, run, dir string) {
			editState(t, dir, `"version": 1`, `"version": 0`)
		}, "format version 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			run := t.TempDir()
			for _, s := range []int{100, 200, 300} {
				mustSave(t, run, sample(s))
			}
			dir := Dir(run, 300)
			c.damage(t, run, dir)
			path, step, err := Latest(run)
			if err != nil || step != 200 || path != Dir(run, 200) {
				t.Fatalf("Latest = %s, %d, %v; want step-000200", path, step, err)
			}
			if c.want == "" {
				return
			}
			_, err = Load(dir)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load: got %v, want ErrCorrupt mentioning %q", err, c.want)
			}
		})
	}
}

// A checkpoint from a newer Inloop is skipped too, with an error that says so
// rather than calling it corrupt.
func TestNewerVersion(t *testing.T) {
	run := t.TempDir()
	mustSave(t, run, sample(1))
	editState(t, Dir(run, 1), `"version": 1`, `"version": 2`)
	_, err := Load(Dir(run, 1))
	if err == nil || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "newer") {
		t.Errorf("got %v, want a newer-version error", err)
	}
	if _, _, err := Latest(run); !errors.Is(err, ErrNoCheckpoint) || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Latest: got %v", err)
	}
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func editState(t *testing.T, dir, old, new string) {
	t.Helper()
	path := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), old, new, 1)
	if s == string(b) {
		t.Fatalf("state.json has no %s", old)
	}
	os.WriteFile(path, []byte(s), 0o644)
}

func TestPrune(t *testing.T) {
	run := t.TempDir()
	for s := 1; s <= 5; s++ {
		mustSave(t, run, sample(s*100))
	}
	root := filepath.Join(run, Subdir)
	os.MkdirAll(filepath.Join(root, ".tmp-step-000600-999"), 0o755) // an interrupted save
	if err := Prune(run, 2); err != nil {
		t.Fatal(err)
	}
	if got := steps(t, run); !equalInts(got, []int{500, 400}) {
		t.Errorf("after Prune(2): %v, want [500 400]", got)
	}
	if _, err := os.Stat(filepath.Join(root, ".tmp-step-000600-999")); !os.IsNotExist(err) {
		t.Error("the interrupted save was not removed")
	}
	// A damaged newest checkpoint does not count towards keep, and is left alone.
	mustSave(t, run, sample(600))
	truncate(t, filepath.Join(Dir(run, 600), AdaptersFile), 10)
	if err := Prune(run, 1); err != nil {
		t.Fatal(err)
	}
	if got := steps(t, run); !equalInts(got, []int{600, 500}) {
		t.Errorf("after Prune(1) with a damaged newest: %v, want [600 500]", got)
	}
	if _, step, _ := Latest(run); step != 500 {
		t.Errorf("Latest = %d, want 500", step)
	}
	if err := Prune(run, 0); err == nil {
		t.Error("Prune(0) accepted")
	}
	if des, _ := os.ReadDir(root); len(des) != 2 {
		t.Errorf("%d entries left, want 2", len(des))
	}
}

func steps(t *testing.T, run string) []int {
	t.Helper()
	es, err := List(run)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range es {
		out = append(out, e.Step)
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

const helperEnv = "INLOOP_CHECKPOINT_SAVE_LOOP"

// TestSaveLoopHelper is not a test: TestKillDuringSave runs the test binary with
// helperEnv set, and then this saves and prunes checkpoints in a loop, as a
// trainer does, until it is killed.
func TestSaveLoopHelper(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process for TestKillDuringSave")
	}
	run, from, _ := strings.Cut(spec, "|")
	step, _ := strconv.Atoi(from)
	for ; ; step++ {
		if err := Save(run, sample(step)); err != nil {
			t.Fatal(err)
		}
		if err := Prune(run, 2); err != nil {
			t.Fatal(err)
		}
	}
}

// A process saving checkpoints is killed with SIGKILL at random moments; after
// every kill, Latest must find a complete checkpoint that loads with the contents
// of its step, never an older one than before, and the resumed loop continues.
func TestKillDuringSave(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	run := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	last, leftovers := -1, 0
	for round := range 12 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSaveLoopHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+run+"|"+strconv.Itoa(last+1))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(150+r.IntN(250)) * time.Millisecond)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err == nil {
			t.Fatal("the helper exited by itself")
		}
		des, _ := os.ReadDir(filepath.Join(run, Subdir))
		for _, de := range des {
			if strings.HasPrefix(de.Name(), ".") {
				leftovers++
			}
		}
		path, step, err := Latest(run)
		if errors.Is(err, ErrNoCheckpoint) && last < 0 {
			continue // killed before its first save completed
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if step < last {
			t.Fatalf("round %d: Latest went back from %d to %d", round, last, step)
		}
		c, err := Load(path)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		sameCheckpoint(t, c, sample(step))
		last = step
	}
	if last < 0 {
		t.Fatal("no checkpoint was ever completed")
	}
	t.Logf("reached step %d; %d interrupted saves or deletions seen", last, leftovers)
}
