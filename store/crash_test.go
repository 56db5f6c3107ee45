package store

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const writerEnv = "INLOOP_STORE_WRITE_LOOP"

// TestWriteLoopHelper is not a test: TestKillDuringWrites runs the test binary
// with writerEnv set ("path|run id|first step"), and then this records
// metrics as a trainer does, alternating single rows and small batches, and
// prints each step once it is committed, until it is killed.
func TestWriteLoopHelper(t *testing.T) {
	spec := os.Getenv(writerEnv)
	if spec == "" {
		t.Skip("helper process for TestKillDuringWrites")
	}
	parts := strings.Split(spec, "|")
	path := parts[0]
	runID, _ := strconv.ParseInt(parts[1], 10, 64)
	step, _ := strconv.Atoi(parts[2])
	s, err := Open(path)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	for ; ; step++ {
		var err error
		if step%4 == 0 {
			err = s.AddMetrics(ctx, []Metric{
				{RunID: runID, Step: step, Name: "loss", Value: lossAt(step)},
				{RunID: runID, Step: step, Name: "lr", Value: 1e-4},
				{RunID: runID, Step: step, Name: "tokens_per_sec", Value: 1234},
			})
		} else {
			err = s.AddMetric(ctx, Metric{RunID: runID, Step: step, Name: "loss", Value: lossAt(step)})
		}
		if err == nil && step%50 == 0 {
			_, err = s.AddCheckpoint(ctx, Checkpoint{RunID: runID, Step: step, Path: fmt.Sprintf("ckpt/%08d", step)})
		}
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		fmt.Fprintln(out, step) // only after the commit returned
		out.Flush()
	}
}

func lossAt(step int) float64 { return 10 / float64(step+1) }

// A process recording metrics is killed with SIGKILL in the middle of its
// stream of writes, several times over. Every step it reported committed must
// be in the database afterwards, and the file must open clean each time.
func TestKillDuringWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	path := filepath.Join(t.TempDir(), "inloop.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	runID, err := s.CreateRun(ctx, Run{Kind: KindTrain, Model: "demo", Status: StatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	r := rand.New(rand.NewPCG(3, 4))
	// committed: steps whose metrics are stored (reported, or found stored after a
	// kill); reported: steps the helper said were done, checkpoint included.
	next, committed, reported := 0, map[int]bool{}, map[int]bool{}
	for round := range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWriteLoopHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%d|%d", writerEnv, path, runID, next))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		seen, killAt := 0, 100+r.IntN(400)
		for lines.Scan() {
			line := lines.Text()
			step, err := strconv.Atoi(line)
			if strings.HasPrefix(line, "error:") {
				t.Fatalf("round %d: helper said %q", round, line)
			} else if err != nil {
				continue // the test framework's own output
			}
			committed[step], reported[step] = true, true
			next = step + 1
			if seen++; seen == killAt {
				time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond) // land anywhere inside a write
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Lines printed before the kill are still in the pipe and were read above.
		if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("round %d: helper ended with %v, want killed", round, err)
		}

		s, err := Open(path) // runs quick_check
		if err != nil {
			t.Fatalf("round %d: reopen after kill: %v", round, err)
		}
		losses, err := s.Metrics(ctx, runID, "loss")
		if err != nil {
			t.Fatal(err)
		}
		got := map[int]bool{}
		for _, m := range losses {
			if m.Value != lossAt(m.Step) {
				t.Errorf("round %d: loss at step %d: got %v, want %v", round, m.Step, m.Value, lossAt(m.Step))
			}
			got[m.Step] = true
		}
		for step := range committed {
			if !got[step] {
				t.Errorf("round %d: step %d was committed and is gone", round, step)
			}
		}
		lr, err := s.Metrics(ctx, runID, "lr")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range lr {
			if !got[m.Step] {
				t.Errorf("round %d: step %d has lr but no loss: a batch was half written", round, m.Step)
			}
		}
		cks, err := s.Checkpoints(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		hasCk := map[int]bool{}
		for _, c := range cks {
			hasCk[c.Step] = true
		}
		// A step stored but not reported may have died between its metrics and
		// its checkpoint, which are two transactions.
		for step := range reported {
			if step%50 == 0 && !hasCk[step] {
				t.Errorf("round %d: the checkpoint of step %d was committed and is gone", round, step)
			}
		}
		// At most the one write in flight at the kill may have landed unreported.
		if extra := len(got) - len(committed); extra > 1 {
			t.Errorf("round %d: %d steps stored but never reported", round, extra)
		}
		interrupted, err := s.MarkRunningInterrupted(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(interrupted) != 1 || interrupted[0].ID != runID {
			t.Fatalf("round %d: MarkRunningInterrupted gave %+v, want run %d", round, interrupted, runID)
		}
		if err := s.UpdateRunStatus(ctx, runID, StatusRunning, ""); err != nil { // resume
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for step := range got { // resume after what is stored, as a trainer would
			committed[step] = true
			next = max(next, step+1)
		}
	}
	t.Logf("%d steps committed across 5 kills", len(committed))
}
