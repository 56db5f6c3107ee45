package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/inloop/inloop/adapt/deltamem"
	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/tokenizer"
	"github.com/inloop/inloop/resources"
	"github.com/inloop/inloop/store"
	"github.com/inloop/inloop/training/data"
	"github.com/inloop/inloop/training/trainer"
)

// ChatMemory turns on δ-mem in a chat (adapt/deltamem): a trained memory reads
// and writes a small state as the conversation goes, so what was said before
// the context dropped it, or before a /reset, still steers the replies, with
// no tokens added. After each reply the state is stored as a new version of
// the chat's memory (undo goes back one) with an adaptation event.
type ChatMemory struct {
	// File is the trained memory; empty: deltamem.safetensors in the model's
	// folder (where `inloop memory train` writes it).
	File string
	// From starts the chat with the newest memory stored for that chat (the
	// same conversation in an earlier run of the app, say); 0 starts empty.
	From int64
}

// MemoryKeep is how many versions of a chat's memory the store keeps.
const MemoryKeep = 50

// chatMemory is a chat's δ-mem: the trained memory and the session's state.
type chatMemory struct {
	mem     *deltamem.Memory
	file    string
	st      *deltamem.State
	spent   time.Duration // st.Spent() when the last version was stored
	writes  int64         // st.Writes then
	stored  bool          // the state has a version in the store
	version int
}

// MemoryTurn is what the memory did during one reply.
type MemoryTurn struct {
	Version int     // the stored version after the reply
	Writes  int64   // positions written during the turn
	MS      float64 // the memory's own compute during the turn
	Norm    float64 // of the state after it
}

// MemoryInfo describes a chat's memory.
type MemoryInfo struct {
	ChatID     int64
	File       string
	Version    int   // 0: nothing stored yet
	Versions   []int // stored, newest first
	Rank       int
	Layers     []int
	Writes     int64
	Norm       float64
	LayerNorms []float64
}

// ErrNoMemory reports a model with no trained memory file.
var ErrNoMemory = errors.New("no trained memory")

// loadChatMemory loads the trained memory a chat spec asks for, for m (the
// chat's model), and the state the chat starts with; nil when it asks for none.
func (w *Workspace) loadChatMemory(ctx context.Context, cs ChatSpec, m *inference.Model, info store.Model) (*chatMemory, error) {
	spec := cs.Memory
	if spec == nil {
		return nil, nil
	}
	if cs.TTT != nil {
		return nil, errors.New("a chat takes δ-mem or test-time training, not both: test-time training answers from a session of its own that the memory would not see")
	}
	file := spec.File
	if file == "" {
		file = deltamem.DefaultPath(info.Path)
	}
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w for %s at %s (train one with: inloop memory train --model %s)", ErrNoMemory, info.Name, file, info.Name)
	}
	mem, err := deltamem.Load(file, m)
	if err != nil {
		return nil, err
	}
	cm := &chatMemory{mem: mem, file: file, st: mem.NewState()}
	if spec.From != 0 {
		row, err := w.Store.ChatMemory(ctx, spec.From)
		if err != nil {
			return nil, err
		}
		st, err := deltamem.UnmarshalState(row.State)
		if err != nil {
			return nil, fmt.Errorf("chat %d's memory: %w", spec.From, err)
		}
		if err := mem.Fits(st); err != nil {
			return nil, fmt.Errorf("chat %d's memory: %w", spec.From, err)
		}
		cm.st, cm.writes = st, st.Writes
	}
	return cm, nil
}

// attachMemory installs the chat's memory in its session's KV cache.
func (c *ChatSession) attachMemory(ctx context.Context) error {
	cm := c.memory
	if cm == nil {
		return nil
	}
	if err := cm.mem.Attach(c.model, c.sess.Cache(), cm.st); err != nil {
		return err
	}
	if cm.writes > 0 { // continued from another chat: that is this chat's first version
		return cm.store(ctx, c, 0)
	}
	return nil
}

// store saves the state as the chat's next memory version.
func (cm *chatMemory) store(ctx context.Context, c *ChatSession, messageID int64) error {
	data, err := cm.st.MarshalBinary()
	if err != nil {
		return err
	}
	v, err := c.w.Store.AddChatMemory(context.WithoutCancel(ctx), store.ChatMemory{ChatID: c.ID, Memory: cm.file, State: data,
		Writes: cm.st.Writes, Norm: cm.st.Norm()}, MemoryKeep)
	if err != nil {
		return err
	}
	cm.version, cm.stored = v, true
	return nil
}

// recordMemory stores the state after a reply and the adaptation event of the
// turn: positions written, the memory's own time, the norm.
func (c *ChatSession) recordMemory(ctx context.Context, turn *Turn) error {
	cm := c.memory
	if cm == nil {
		return nil
	}
	before := cm.version
	mt := &MemoryTurn{Writes: cm.st.Writes - cm.writes, MS: float64(cm.st.Spent()-cm.spent) / float64(time.Millisecond), Norm: cm.st.Norm()}
	if err := cm.store(ctx, c, turn.MessageID); err != nil {
		return err
	}
	cm.spent, cm.writes = cm.st.Spent(), cm.st.Writes
	mt.Version = cm.version
	turn.Memory = mt
	detail, _ := json.Marshal(map[string]any{"op": "write", "writes": mt.Writes, "total_writes": cm.st.Writes, "norm": mt.Norm, "memory": cm.file})
	_, err := c.w.Store.AddAdaptationEvent(context.WithoutCancel(ctx), store.AdaptationEvent{Model: c.Info.Name, ChatID: c.ID, MessageID: turn.MessageID,
		Method: store.MethodDeltaMem, MS: mt.MS, VersionBefore: before, VersionAfter: mt.Version, Detail: detail})
	return err
}

// MemoryInfo describes the chat's memory as it is now; ok is false when the
// chat has none.
func (c *ChatSession) MemoryInfo() (MemoryInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cm := c.memory
	if cm == nil {
		return MemoryInfo{}, false
	}
	return MemoryInfo{ChatID: c.ID, File: cm.file, Version: cm.version, Rank: cm.st.Rank, Layers: slices.Clone(cm.st.Layers),
		Writes: cm.st.Writes, Norm: cm.st.Norm(), LayerNorms: cm.st.LayerNorms()}, true
}

// ResetMemory empties the chat's memory (the KV cache and the conversation stay)
// and stores the empty state as a new version, so it can be undone.
func (c *ChatSession) ResetMemory(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cm := c.memory
	if cm == nil {
		return errors.New("this chat has no memory")
	}
	before := cm.version
	cm.st.Reset()
	cm.writes = 0
	if err := cm.store(ctx, c, 0); err != nil {
		return err
	}
	return c.w.memoryEvent(ctx, c.Info.Name, c.ID, "reset", before, cm.version)
}

// UndoMemory goes back to the chat's previous memory version.
func (c *ChatSession) UndoMemory(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cm := c.memory
	if cm == nil {
		return errors.New("this chat has no memory")
	}
	st, version, err := c.w.undoChatMemory(ctx, c.ID)
	if err != nil {
		return err
	}
	if st == nil {
		st = cm.mem.NewState()
	} else if err := cm.mem.Fits(st); err != nil {
		return err
	}
	// The hooks hold cm.st: change it in place.
	cm.st.Reset()
	for i := range st.S {
		copy(cm.st.S[i], st.S[i])
		copy(cm.st.Prev[i], st.Prev[i])
	}
	cm.st.Writes, cm.writes, cm.version = st.Writes, st.Writes, version
	return nil
}

// undoChatMemory drops a chat's newest memory version and returns the one
// before it (nil and 0 when none is left), recording the undo.
func (w *Workspace) undoChatMemory(ctx context.Context, chatID int64) (*deltamem.State, int, error) {
	newest, err := w.Store.ChatMemory(ctx, chatID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, 0, fmt.Errorf("chat %d has no memory version to undo", chatID)
	}
	if err != nil {
		return nil, 0, err
	}
	if err := w.Store.DropChatMemory(ctx, chatID); err != nil {
		return nil, 0, err
	}
	events, err := w.Store.AdaptationEvents(ctx, store.EventFilter{ChatID: chatID, Method: store.MethodDeltaMem})
	if err == nil {
		for _, e := range events {
			if e.VersionAfter == newest.Version && !e.Undone {
				err = w.Store.MarkUndone(ctx, e.ID, true)
				break
			}
		}
	}
	if err != nil {
		return nil, 0, err
	}
	prev, err := w.Store.ChatMemory(ctx, chatID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := deltamem.UnmarshalState(prev.State)
	if err != nil {
		return nil, 0, fmt.Errorf("chat %d's memory version %d: %w", chatID, prev.Version, err)
	}
	return st, prev.Version, nil
}

func (w *Workspace) memoryEvent(ctx context.Context, model string, chatID int64, op string, before, after int) error {
	detail, _ := json.Marshal(map[string]any{"op": op})
	_, err := w.Store.AddAdaptationEvent(context.WithoutCancel(ctx), store.AdaptationEvent{Model: model, ChatID: chatID,
		Method: store.MethodDeltaMem, VersionBefore: before, VersionAfter: after, Detail: detail})
	return err
}

// ChatMemoryInfo describes the stored memory of a chat (open or not).
func (w *Workspace) ChatMemoryInfo(ctx context.Context, chatID int64) (MemoryInfo, error) {
	row, err := w.Store.ChatMemory(ctx, chatID)
	if errors.Is(err, store.ErrNotFound) {
		return MemoryInfo{}, fmt.Errorf("chat %d has no stored memory", chatID)
	}
	if err != nil {
		return MemoryInfo{}, err
	}
	st, err := deltamem.UnmarshalState(row.State)
	if err != nil {
		return MemoryInfo{}, fmt.Errorf("chat %d's memory version %d: %w", chatID, row.Version, err)
	}
	info := MemoryInfo{ChatID: chatID, File: row.Memory, Version: row.Version, Rank: st.Rank, Layers: st.Layers,
		Writes: st.Writes, Norm: st.Norm(), LayerNorms: st.LayerNorms()}
	vs, err := w.Store.ChatMemoryVersions(ctx, chatID)
	if err != nil {
		return info, err
	}
	for _, v := range vs {
		info.Versions = append(info.Versions, v.Version)
	}
	return info, nil
}

// ResetChatMemory stores an empty memory as a chat's next version (undoable).
func (w *Workspace) ResetChatMemory(ctx context.Context, chatID int64) error {
	row, err := w.Store.ChatMemory(ctx, chatID)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("chat %d has no stored memory", chatID)
	}
	if err != nil {
		return err
	}
	st, err := deltamem.UnmarshalState(row.State)
	if err != nil {
		return fmt.Errorf("chat %d's memory version %d: %w", chatID, row.Version, err)
	}
	st.Reset()
	data, err := st.MarshalBinary()
	if err != nil {
		return err
	}
	v, err := w.Store.AddChatMemory(ctx, store.ChatMemory{ChatID: chatID, Memory: row.Memory, State: data}, MemoryKeep)
	if err != nil {
		return err
	}
	chat, _ := w.Store.Chat(ctx, chatID)
	return w.memoryEvent(ctx, chat.Model, chatID, "reset", row.Version, v)
}

// UndoChatMemory drops a chat's newest memory version; it returns the version
// that is the chat's memory now (0: none).
func (w *Workspace) UndoChatMemory(ctx context.Context, chatID int64) (int, error) {
	_, v, err := w.undoChatMemory(ctx, chatID)
	return v, err
}

// MemoryTrainSpec trains a model's memory.
type MemoryTrainSpec struct {
	Model string
	// Data is a folder of documents; empty: the bundled sample support tickets.
	Data    string
	Out     string // the memory file; empty: deltamem.safetensors in the model's folder
	Options deltamem.TrainOptions
	Eval    int // held-out sessions scored before saving; 0: 200
}

// MemoryTrainReport is what TrainMemory did.
type MemoryTrainReport struct {
	Path      string
	Documents int // training documents (a quarter more were held out)
	Result    deltamem.TrainResult
	Recall    deltamem.Recall // on held-out documents
}

// TrainMemory trains a δ-mem memory for a model on documents (three quarters;
// the rest held out to measure recall with and without it), saves it and
// records an adaptation event.
func (w *Workspace) TrainMemory(ctx context.Context, spec MemoryTrainSpec, onEvent func(trainer.Event)) (MemoryTrainReport, error) {
	var rep MemoryTrainReport
	m, info, err := w.SharedModel(ctx, spec.Model)
	if err != nil {
		return rep, err
	}
	tok, err := tokenizer.Load(info.Path)
	if err != nil {
		return rep, err
	}
	docs, err := memoryDocuments(ctx, spec.Data, tok)
	if err != nil {
		return rep, err
	}
	if len(docs) < 8 {
		return rep, fmt.Errorf("%d documents: the memory needs at least 8 to train on and to hold some out", len(docs))
	}
	split := len(docs) * 3 / 4
	rep.Documents = split
	mem, res, err := deltamem.Train(ctx, m, nil, docs[:split], spec.Options, onEvent)
	rep.Result = res
	if err != nil {
		return rep, err
	}
	task := spec.Options.Task
	if task == (deltamem.Task{}) {
		task = deltamem.DefaultTask
	}
	n := spec.Eval
	if n == 0 {
		n = 200
	}
	eps, err := task.Episodes(docs[split:], n, spec.Options.Seed+1)
	if err != nil {
		return rep, err
	}
	if rep.Recall, err = deltamem.Evaluate(ctx, m, mem, eps); err != nil {
		return rep, err
	}
	rep.Path = spec.Out
	if rep.Path == "" {
		rep.Path = deltamem.DefaultPath(info.Path)
	}
	if err := mem.Save(rep.Path); err != nil {
		return rep, err
	}
	detail, _ := json.Marshal(map[string]any{"op": "train", "path": rep.Path, "documents": split, "steps": len(res.Steps),
		"params": res.Params, "recall_without": rep.Recall.Without.Accuracy, "recall_with": rep.Recall.With.Accuracy,
		"recall_control": rep.Recall.Control.Accuracy})
	_, err = w.Store.AddAdaptationEvent(context.WithoutCancel(ctx), store.AdaptationEvent{Model: info.Name, Method: store.MethodDeltaMem,
		MS: res.TotalMS, Detail: detail})
	return rep, err
}

// memoryDocuments reads the training documents as token sequences: a folder's
// documents (each file's chunks joined), or the bundled support tickets.
func memoryDocuments(ctx context.Context, dir string, tok *tokenizer.Tokenizer) ([][]int, error) {
	if dir == "" {
		return ticketDocuments(tok)
	}
	corpus, err := data.NewCorpus(dir, tok, data.ChunkOptions{})
	if err != nil {
		return nil, err
	}
	if _, err := corpus.ScanContext(ctx, nil); err != nil {
		return nil, err
	}
	byFile := map[string][]int{}
	var files []string
	for _, ch := range corpus.Chunks() {
		if _, ok := byFile[ch.File]; !ok {
			files = append(files, ch.File)
		}
		for _, t := range ch.Tokens {
			byFile[ch.File] = append(byFile[ch.File], int(t))
		}
	}
	var docs [][]int
	for _, f := range files {
		docs = append(docs, byFile[f])
	}
	return docs, nil
}

// ticketDocuments are the sample tickets' texts, one document each.
func ticketDocuments(tok *tokenizer.Tokenizer) ([][]int, error) {
	_, rows := resources.TicketsTask()
	var docs [][]int
	sc := bufio.NewScanner(bytes.NewReader(rows))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var row struct {
			State json.RawMessage `json:"state"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			return nil, fmt.Errorf("sample tickets: %w", err)
		}
		var text string
		if json.Unmarshal(row.State, &text) != nil {
			var obj map[string]string
			if err := json.Unmarshal(row.State, &obj); err != nil {
				return nil, fmt.Errorf("sample tickets: %w", err)
			}
			var b strings.Builder
			for _, k := range slices.Sorted(maps.Keys(obj)) {
				fmt.Fprintf(&b, "%s: %s\n", k, obj[k])
			}
			text = b.String()
		}
		ids, err := tok.Encode(text, false)
		if err != nil {
			return nil, err
		}
		docs = append(docs, ids)
	}
	return docs, sc.Err()
}
