package decide

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
	"github.com/inloop/inloop/resources"
)

var demoRun = flag.String("demo", "", "train on the sample tickets task with the bundled demo model: comma-separated row counts, e.g. 50,200,all (slow)")

// demoModel writes the bundled demo model to a folder and loads it.
func demoModel(t testing.TB) (*inference.Model, *tokenizer.Tokenizer) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "demo")
	if err := os.CopyFS(dir, resources.DemoFS()); err != nil {
		t.Fatal(err)
	}
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	m, err := inference.Load(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok
}

func ticketsTask(t testing.TB) (*Task, []Row) {
	t.Helper()
	taskJSON, rowsJSONL := resources.TicketsTask()
	task, err := ParseTask(taskJSON)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ParseRows(bytes.NewReader(rowsJSONL), task, ParseOptions{RequireAnswers: true})
	if err != nil || rep.Bad > 0 {
		t.Fatalf("rows: %v %v", err, rep.Err())
	}
	return task, rep.Rows
}

func TestDemoTickets(t *testing.T) {
	if *demoRun == "" {
		t.Skip("run with -demo 50,200,all")
	}
	m, tok := demoModel(t)
	task, rows := ticketsTask(t)
	enc, _ := NewEncoder(tok, task, 4093, 512)
	var lens []int
	for _, r := range rows[:200] {
		st, _ := enc.StateTokens(r.State)
		lens = append(lens, len(enc.Sequence(0, st).Tokens), len(enc.Sequence(1, st).Tokens))
	}
	fmt.Println("lengths sample", lens[:20])
	start := time.Now()
	_, res, err := Train(context.Background(), m, tok, task, rows, Options{Iters: 20, StepsPerEval: -1}, func(ev Event) {
		fmt.Printf("%s step %d loss %.4f val %.4f acc %v %s (%s)\n", ev.Kind, ev.Step, ev.Loss, ev.ValLoss, ev.Accuracy, ev.Message, time.Since(start).Round(time.Millisecond))
	})
	fmt.Println(res, err)
}
