package store

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// readRunsUntil lists runs in a loop, as the Runs screen polls, until stop is
// closed; it counts the lists and keeps the first error.
func readRunsUntil(s *Store, stop <-chan struct{}, lists *atomic.Int64, firstErr *atomic.Value) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx := context.Background()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.Runs(ctx, RunFilter{Limit: 50}); err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			if _, err := s.LastMetrics(ctx, 1); err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			lists.Add(1)
		}
	})
	return &wg
}

// A trainer records metrics, one commit per row and in small batches, while
// readers list runs. Every row arrives, and no reader or writer ever sees
// SQLITE_BUSY. (The rate is measured by BenchmarkMetricsWhileReading.)
func TestMetricsWhileReading(t *testing.T) {
	s, ctx := open(t), context.Background()
	for range 30 {
		if _, err := s.CreateRun(ctx, Run{Kind: KindTrain, Status: StatusDone}); err != nil {
			t.Fatal(err)
		}
	}
	runID, err := s.CreateRun(ctx, Run{Kind: KindTrain, Status: StatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var lists atomic.Int64
	var readErr atomic.Value
	var readers []*sync.WaitGroup
	for range 3 {
		readers = append(readers, readRunsUntil(s, stop, &lists, &readErr))
	}

	const single, batches, batchSize = 3000, 250, 8
	for step := range single {
		if err := s.AddMetric(ctx, Metric{RunID: runID, Step: step, Name: "loss", Value: float64(step)}); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	for b := range batches {
		var ms []Metric
		for i := range batchSize {
			ms = append(ms, Metric{RunID: runID, Step: b*batchSize + i, Name: "val_loss", Value: 1})
		}
		if err := s.AddMetrics(ctx, ms); err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
	}
	// Let the readers show progress even on a machine where writing was quick.
	for deadline := time.Now().Add(10 * time.Second); lists.Load() < 10 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	for _, wg := range readers {
		wg.Wait()
	}
	if err, _ := readErr.Load().(error); err != nil {
		t.Fatalf("a reader failed: %v", err)
	}
	if lists.Load() == 0 {
		t.Fatal("the readers made no progress")
	}
	for name, want := range map[string]int{"loss": single, "val_loss": batches * batchSize} {
		ms, err := s.Metrics(ctx, runID, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != want {
			t.Errorf("%s: got %d rows, want %d", name, len(ms), want)
		}
	}
	t.Logf("readers listed runs %d times during %d metric writes", lists.Load(), single+batches*batchSize)
}

// BenchmarkMetricsWhileReading measures the rate at which a trainer can record
// metrics while three readers list runs in a loop; the goal is at least 1,000
// rows/s.
func BenchmarkMetricsWhileReading(b *testing.B) {
	for _, bc := range []struct {
		name  string
		batch int
	}{{"commit-per-row", 1}, {"batch-of-8", 8}} {
		b.Run(bc.name, func(b *testing.B) {
			s, ctx := open(b), context.Background()
			for range 30 {
				s.CreateRun(ctx, Run{Kind: KindTrain, Status: StatusDone})
			}
			runID, _ := s.CreateRun(ctx, Run{Kind: KindTrain, Status: StatusRunning})
			stop := make(chan struct{})
			var lists atomic.Int64
			var readErr atomic.Value
			var readers []*sync.WaitGroup
			for range 3 {
				readers = append(readers, readRunsUntil(s, stop, &lists, &readErr))
			}
			start := time.Now()
			rows := 0
			for step := 0; b.Loop(); step++ {
				if bc.batch == 1 {
					if err := s.AddMetric(ctx, Metric{RunID: runID, Step: step, Name: "loss", Value: 1}); err != nil {
						b.Fatal(err)
					}
				} else {
					ms := make([]Metric, bc.batch)
					for i := range ms {
						ms[i] = Metric{RunID: runID, Step: step, Name: "m" + string(rune('a'+i)), Value: 1}
					}
					if err := s.AddMetrics(ctx, ms); err != nil {
						b.Fatal(err)
					}
				}
				rows += bc.batch
			}
			elapsed := time.Since(start)
			close(stop)
			for _, wg := range readers {
				wg.Wait()
			}
			if err, _ := readErr.Load().(error); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(rows)/elapsed.Seconds(), "rows/s")
			b.ReportMetric(float64(lists.Load())/elapsed.Seconds(), "lists/s")
		})
	}
}
