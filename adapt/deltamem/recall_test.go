package deltamem

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/inloop/inloop/inference/inferencetest"
	"github.com/inloop/inloop/inference/tokenizer"
	"github.com/inloop/inloop/resources"
	"github.com/inloop/inloop/training/trainer"
)

// The recall experiment on the bundled demo model is long (minutes on two
// cores), so it runs only when asked:
//
//	go test ./adapt/deltamem -run TestRecallDemo -v -timeout 2h -args -recall -recall-steps 400
//
// Its numbers are in the note.
var (
	recallFlag  = flag.Bool("recall", false, "train a memory on the demo model and measure recall (slow)")
	recallSteps = flag.Int("recall-steps", DefaultSteps, "training steps of the recall experiment")
	recallRank  = flag.Int("recall-rank", DefaultRank, "rank of the memory in the recall experiment")
	recallEval  = flag.Int("recall-eval", 200, "held-out episodes scored")
	recallSave  = flag.String("recall-save", "", "keep the trained memory in this file")
	recallLoad  = flag.String("recall-load", "", "measure this trained memory instead of training one")
	recallTask  = flag.String("recall-task", "", "fact,filler,cue,answer lengths of the task; empty: DefaultTask")
	recallLR    = flag.Float64("recall-lr", DefaultLearningRate, "learning rate of the recall experiment")
	recallFill  = flag.String("recall-fillers", "16,64", "filler lengths (tokens between the window's reset and the cue) to measure")
)

// ticketDocs are the sample support tickets as documents: subject and body
// (or the whole state) as text, tokenized with tok.
func ticketDocs(t testing.TB, tok *tokenizer.Tokenizer) [][]int {
	t.Helper()
	_, rows := resources.TicketsTask()
	var docs [][]int
	sc := bufio.NewScanner(bytes.NewReader(rows))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var row struct {
			State json.RawMessage `json:"state"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		var text string
		if json.Unmarshal(row.State, &text) != nil {
			var obj map[string]string
			if err := json.Unmarshal(row.State, &obj); err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, k := range slices.Sorted(func(yield func(string) bool) {
				for k := range obj {
					if !yield(k) {
						return
					}
				}
			}) {
				fmt.Fprintf(&b, "%s: %s\n", k, obj[k])
			}
			text = b.String()
		}
		ids, err := tok.Encode(text, false)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, ids)
	}
	if len(docs) < 100 {
		t.Fatalf("only %d tickets", len(docs))
	}
	return docs
}

// TestRecallDemo is the claim on the demo model: on sessions built from
// tickets the memory never trained on, with the passage gone from the window,
// answers are recalled better with the trained memory than without it.
func TestRecallDemo(t *testing.T) {
	if !*recallFlag {
		t.Skip("long: run with -args -recall")
	}
	m, tok := inferencetest.Load(t, inferencetest.Demo(t))
	docs := ticketDocs(t, tok)
	split := len(docs) * 3 / 4
	train, held := docs[:split], docs[split:]
	task := DefaultTask
	if *recallTask != "" {
		if _, err := fmt.Sscanf(*recallTask, "%d,%d,%d,%d", &task.Fact, &task.Filler, &task.Cue, &task.Answer); err != nil {
			t.Fatalf("-recall-task %q: %v", *recallTask, err)
		}
	}
	evalEps, err := task.Episodes(held, *recallEval, 99)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var mem *Memory
	if *recallLoad != "" {
		if mem, err = Load(*recallLoad, m); err != nil {
			t.Fatal(err)
		}
	} else {
		var res TrainResult
		mem, res, err = Train(ctx, m, nil, train, TrainOptions{Task: task, Steps: *recallSteps, Seed: 1, LearningRate: *recallLR, Config: Config{Rank: *recallRank}},
			func(ev trainer.Event) {
				if ev.Kind == trainer.EventTrain && (ev.Step%25 == 0 || ev.Step == 1) {
					t.Logf("step %d/%d loss %.3f (%s)", ev.Step, ev.Iters, ev.Loss, ev.Elapsed.Round(1e9))
				}
			})
		if err != nil {
			t.Fatal(err)
		}
		var stepMS float64
		for _, s := range res.Steps {
			stepMS += s.MS
		}
		t.Logf("memory: %d parameters (%.2f%% of the model), %d steps, %.0f ms per step", res.Params, 100*res.Fraction, len(res.Steps), stepMS/float64(len(res.Steps)))
	}
	logRecall := func(name string, r Recall) {
		t.Logf("%s: without %.3f (nll %.3f) | with %.3f (nll %.3f) | control (another passage read) %.3f (nll %.3f) | in window %.3f (nll %.3f) | in window + memory %.3f (nll %.3f)",
			name, r.Without.Accuracy, r.Without.NLL, r.With.Accuracy, r.With.NLL, r.Control.Accuracy, r.Control.NLL,
			r.InWindow.Accuracy, r.InWindow.NLL, r.InWindowWith.Accuracy, r.InWindowWith.NLL)
	}
	rec, err := Evaluate(ctx, m, mem, evalEps)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("task %+v, %d held-out episodes (%d answer tokens)", task, len(evalEps), rec.With.Tokens)
	logRecall("held-out documents", rec)
	trainEps, _ := task.Episodes(train, *recallEval, 98)
	recTrain, err := Evaluate(ctx, m, mem, trainEps)
	if err != nil {
		t.Fatal(err)
	}
	logRecall("trained-on documents", recTrain)
	for _, f := range strings.Split(*recallFill, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n == task.Filler {
			continue
		}
		longer := task
		longer.Filler = n
		eps, err := longer.Episodes(held, *recallEval, 97)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Evaluate(ctx, m, mem, eps)
		if err != nil {
			t.Fatal(err)
		}
		logRecall(fmt.Sprintf("held-out, filler %d", n), r)
	}
	if *recallSave != "" {
		if err := mem.Save(*recallSave); err != nil {
			t.Fatal(err)
		}
	}
	if !(rec.With.Accuracy > rec.Without.Accuracy && rec.With.NLL < rec.Without.NLL) {
		t.Fatalf("held-out recall with the memory %.3f (nll %.3f), without %.3f (nll %.3f): want better with it",
			rec.With.Accuracy, rec.With.NLL, rec.Without.Accuracy, rec.Without.NLL)
	}
	// The gain must come from the passage read, not from the memory alone.
	if !(rec.With.Accuracy > rec.Control.Accuracy && rec.With.NLL < rec.Control.NLL) {
		t.Fatalf("held-out recall with the passage read %.3f (nll %.3f), with another passage read %.3f (nll %.3f): want better with the passage",
			rec.With.Accuracy, rec.With.NLL, rec.Control.Accuracy, rec.Control.NLL)
	}
}
