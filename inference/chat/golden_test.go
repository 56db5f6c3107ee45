package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// goldenCase is one entry of testdata/conversations.json: a conversation in
// Hugging Face's message format plus apply_chat_template's arguments.
type goldenCase struct {
	Model               string            `json:"model"`
	Name                string            `json:"name"`
	Messages            []json.RawMessage `json:"messages"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	EnableThinking      *bool             `json:"enable_thinking"`
	Tools               json.RawMessage   `json:"tools"`
	Extra               map[string]any    `json:"extra"`
	Now                 string            `json:"now"`
}

type golden struct {
	Text  *string `json:"text"`
	Error string  `json:"error"`
}

// hfMessage converts a message in Hugging Face's JSON shape to a Message.
func hfMessage(t testing.TB, raw json.RawMessage) Message {
	t.Helper()
	var m struct {
		Role             string `json:"role"`
		Content          string `json:"content"`
		ReasoningContent string `json:"reasoning_content"`
		ToolCallID       string `json:"tool_call_id"`
		Name             string `json:"name"`
		ToolCalls        []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("message %s: %v", raw, err)
	}
	msg := Message{Role: m.Role, Content: m.Content, ReasoningContent: m.ReasoningContent, ToolCallID: m.ToolCallID, Name: m.Name}
	for _, c := range m.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
	}
	return msg
}

func loadJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestGoldens renders every conversation of testdata/conversations.json with
// the model's real template and compares the prompt byte for byte with what
// @huggingface/jinja rendered (testdata/goldens.json, made by
// render_goldens.mjs).
func TestGoldens(t *testing.T) {
	var conv struct {
		Cases []goldenCase `json:"cases"`
	}
	loadJSON(t, filepath.Join("testdata", "conversations.json"), &conv)
	var gold struct {
		Engine  string            `json:"engine"`
		Goldens map[string]golden `json:"goldens"`
	}
	loadJSON(t, filepath.Join("testdata", "goldens.json"), &gold)
	if len(conv.Cases) != len(gold.Goldens) {
		t.Fatalf("%d conversations but %d goldens: rerun render_goldens.mjs", len(conv.Cases), len(gold.Goldens))
	}

	templates := map[string]*Template{}
	for _, c := range conv.Cases {
		key := c.Model + "/" + c.Name
		t.Run(key, func(t *testing.T) {
			want, ok := gold.Goldens[key]
			if !ok {
				t.Fatalf("no golden for %s: rerun render_goldens.mjs", key)
			}
			tmpl := templates[c.Model]
			if tmpl == nil {
				var err error
				if tmpl, err = LoadTemplate(filepath.Join("testdata", "models", c.Model)); err != nil {
					t.Fatal(err)
				}
				templates[c.Model] = tmpl
			}
			msgs := make([]Message, len(c.Messages))
			for i, raw := range c.Messages {
				msgs[i] = hfMessage(t, raw)
			}
			opts := RenderOptions{AddGenerationPrompt: c.AddGenerationPrompt, EnableThinking: c.EnableThinking, Extra: c.Extra}
			if len(c.Tools) > 0 && string(c.Tools) != "null" {
				opts.ToolsJSON = c.Tools
			}
			if c.Now != "" {
				now, err := time.Parse(time.RFC3339, c.Now)
				if err != nil {
					t.Fatal(err)
				}
				opts.Now = now
			}

			got, err := tmpl.Render(msgs, opts)
			if want.Text == nil {
				if !errors.Is(err, ErrRaised) || !strings.Contains(err.Error(), want.Error) {
					t.Fatalf("got error %v, want the template's exception %q", err, want.Error)
				}
				var te *Error
				if !errors.As(err, &te) || te.Template != "default" || te.Op != "render" {
					t.Fatalf("error %v does not name the template", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != *want.Text {
				t.Errorf("%s differs from %s:\n%s", key, gold.Engine, firstDifference(got, *want.Text))
			}
		})
	}
}

// firstDifference shows where two prompts part ways, with some context.
func firstDifference(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(0, i-60)
	clip := func(s string) string { return s[min(from, len(s)):min(i+60, len(s))] }
	return "at byte " + itoa(i) + "\n got: " + quote(clip(got)) + "\nwant: " + quote(clip(want))
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// BenchmarkGoldens renders every conversation of testdata/conversations.json
// once per iteration: the cost of real templates, which the render budget
// must not change.
func BenchmarkGoldens(b *testing.B) {
	var conv struct {
		Cases []goldenCase `json:"cases"`
	}
	data, err := os.ReadFile(filepath.Join("testdata", "conversations.json"))
	if err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal(data, &conv); err != nil {
		b.Fatal(err)
	}
	type job struct {
		tmpl *Template
		msgs []Message
		opts RenderOptions
	}
	var jobs []job
	for _, c := range conv.Cases {
		tmpl, err := LoadTemplate(filepath.Join("testdata", "models", c.Model))
		if err != nil {
			b.Fatal(err)
		}
		msgs := make([]Message, len(c.Messages))
		for i, raw := range c.Messages {
			msgs[i] = hfMessage(b, raw)
		}
		opts := RenderOptions{AddGenerationPrompt: c.AddGenerationPrompt, EnableThinking: c.EnableThinking, Extra: c.Extra, Now: time.Unix(0, 0)}
		if len(c.Tools) > 0 && string(c.Tools) != "null" {
			opts.ToolsJSON = c.Tools
		}
		jobs = append(jobs, job{tmpl, msgs, opts})
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, j := range jobs {
			j.tmpl.Render(j.msgs, j.opts)
		}
	}
}
