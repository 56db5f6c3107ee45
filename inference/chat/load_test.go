package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestStopTokensOfRealModels(t *testing.T) {
	for _, tc := range []struct {
		model    string
		eosIDs   []int
		stops    []string
		bos      string
		fallback bool
	}{
		{"qwen3-0.6b", []int{151645, 151643}, []string{"<|im_end|>", "<|endoftext|>"}, "", false},
		{"qwen2.5-0.5b-instruct", []int{151645, 151643}, []string{"<|im_end|>", "<|endoftext|>"}, "", false},
		{"llama-3.2-1b-instruct", []int{128001, 128008, 128009}, []string{"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"}, "<|begin_of_text|>", false},
		{"smollm2-135m-instruct", []int{2}, []string{"<|im_end|>"}, "<|im_start|>", false},
		{"mistral-7b-instruct-v0.2", []int{2}, []string{"</s>"}, "<s>", false},
		{"no-template", []int{2}, []string{"</s>", "<|im_end|>"}, "<s>", true},
	} {
		t.Run(tc.model, func(t *testing.T) {
			tmpl, err := LoadTemplate(filepath.Join("testdata", "models", tc.model))
			if err != nil {
				t.Fatal(err)
			}
			if got := tmpl.EOSTokens(); !slices.Equal(got, tc.eosIDs) {
				t.Errorf("EOSTokens() = %v, want %v", got, tc.eosIDs)
			}
			if got := tmpl.StopStrings(); !slices.Equal(got, tc.stops) {
				t.Errorf("StopStrings() = %q, want %q", got, tc.stops)
			}
			if got := tmpl.Tokens().BOS; got != tc.bos {
				t.Errorf("BOS = %q, want %q", got, tc.bos)
			}
			if tmpl.Fallback() != tc.fallback {
				t.Errorf("Fallback() = %v, want %v", tmpl.Fallback(), tc.fallback)
			}
		})
	}
}

// writeModel makes a model folder from file name -> content.
func writeModel(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNamedTemplates(t *testing.T) {
	dir := writeModel(t, map[string]string{
		"tokenizer_config.json": mustJSON(t, map[string]any{
			"eos_token": map[string]any{"content": "<end>", "special": true},
			"chat_template": []map[string]string{
				{"name": "default", "template": "D{% for m in messages %}[{{ m.content }}]{% endfor %}"},
				{"name": "tool_use", "template": "T{{ tools | length }}"},
				{"name": "rag", "template": "R{{ documents is none }}"},
			},
		}),
	})
	tmpl, err := LoadTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tmpl.Names(), []string{"default", "rag", "tool_use"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	msgs := []Message{{Role: "user", Content: "hi"}}
	if got, _ := tmpl.Render(msgs, RenderOptions{}); got != "D[hi]" {
		t.Errorf("default rendered %q", got)
	}
	tools := []map[string]any{{"type": "function"}}
	if got, _ := tmpl.Render(msgs, RenderOptions{Tools: tools}); got != "T1" {
		t.Errorf("with tools, the default template should defer to tool_use; got %q", got)
	}
	rag, err := tmpl.Named("rag")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := rag.Render(msgs, RenderOptions{}); got != "RTrue" {
		t.Errorf("rag rendered %q", got)
	}
	if _, err := tmpl.Named("nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Named(nope): got %v", err)
	}
	if got := tmpl.StopStrings(); !slices.Equal(got, []string{"<end>"}) {
		t.Errorf("StopStrings() = %q", got)
	}
}

func TestTemplateFilesWinOverTokenizerConfig(t *testing.T) {
	dir := writeModel(t, map[string]string{
		"tokenizer_config.json":              `{"chat_template": "old", "bos_token": "<s>"}`,
		"chat_template.jinja":                "{{ bos_token }}new\n",
		"additional_chat_templates/x.jinja":  "extra",
		"additional_chat_templates/notes.md": "ignored",
	})
	tmpl, err := LoadTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tmpl.Render(nil, RenderOptions{}); got != "<s>new" {
		t.Errorf("got %q, want chat_template.jinja's output", got)
	}
	x, err := tmpl.Named("x")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := x.Render(nil, RenderOptions{}); got != "extra" {
		t.Errorf("x rendered %q", got)
	}
}

func TestChatTemplateJSON(t *testing.T) {
	dir := writeModel(t, map[string]string{"chat_template.json": `{"chat_template": "P{{ messages | length }}"}`})
	tmpl, err := LoadTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tmpl.Render([]Message{{Role: "user"}}, RenderOptions{}); got != "P1" || tmpl.Fallback() {
		t.Errorf("got %q (fallback %v)", got, tmpl.Fallback())
	}
}

func TestLoadErrors(t *testing.T) {
	big := strings.Repeat("x", maxTemplateBytes+1)
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"bad json", map[string]string{"tokenizer_config.json": `{"chat_template": `}, "tokenizer_config.json"},
		{"template of the wrong type", map[string]string{"tokenizer_config.json": `{"chat_template": 3}`}, "chat_template"},
		{"token of the wrong type", map[string]string{"tokenizer_config.json": `{"eos_token": 3}`}, "eos_token"},
		{"unnamed template", map[string]string{"tokenizer_config.json": `{"chat_template": [{"template": "x"}]}`}, "no name"},
		{"no default among several", map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "a", "template": "x"}, {"name": "b", "template": "y"}]}`}, `none named "default"`},
		{"template too large", map[string]string{"chat_template.jinja": big}, fmt.Sprintf("%d bytes, over the %d-byte limit", len(big), maxTemplateBytes)},
		{"template too large in config", map[string]string{"tokenizer_config.json": mustJSON(t, map[string]string{"chat_template": big})}, "more than"},
		{"bad eos ids", map[string]string{"generation_config.json": `{"eos_token_id": "x"}`}, "eos_token_id"},
		{"syntax error", map[string]string{"tokenizer_config.json": `{"chat_template": "{% for m in messages %}x"}`}, `chat template "default"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadTemplate(writeModel(t, tc.files))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := LoadTemplate(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing folder loaded")
	}
}

func TestSyntaxErrorNamesTemplate(t *testing.T) {
	dir := writeModel(t, map[string]string{"tokenizer_config.json": `{"chat_template": "{{ 1 + }}"}`})
	_, err := LoadTemplate(dir)
	var te *Error
	if !errors.As(err, &te) || te.Template != "default" || te.Op != "parse" || te.File != filepath.Join(dir, "tokenizer_config.json") {
		t.Fatalf("got %v, want a parse *Error naming default and its file", err)
	}
}

func TestBrokenNamedTemplateDoesNotBlockDefault(t *testing.T) {
	dir := writeModel(t, map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "default", "template": "ok"}, {"name": "tool_use", "template": "{% if %}"}]}`})
	tmpl, err := LoadTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Named("tool_use"); err == nil {
		t.Error("Named(tool_use) of a broken template: no error")
	}
}

func TestRenderErrors(t *testing.T) {
	tmpl, err := New("strict", "{{ raise_exception('no ' + messages[0].role) }}", SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render([]Message{{Role: "robot"}}, RenderOptions{})
	var te *Error
	if !errors.Is(err, ErrRaised) || !errors.As(err, &te) || te.Template != "strict" || !strings.Contains(err.Error(), "no robot") {
		t.Fatalf("got %v, want the raised message from template strict", err)
	}
	if _, err := tmpl.Render(nil, RenderOptions{ToolsJSON: json.RawMessage(`{"not": "a list"}`)}); err == nil {
		t.Error("ToolsJSON that is not an array: no error")
	}
}

func TestToolsFromGoMapsAreSorted(t *testing.T) {
	tmpl, err := New("t", "{{ tools | tojson }}", SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "f", "parameters": map[string]any{"type": "object"}}}}
	got, err := tmpl.Render(nil, RenderOptions{Tools: tools})
	if want := `[{"function": {"name": "f", "parameters": {"type": "object"}}, "type": "function"}]`; err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
}

func TestToolCallArgumentsThatAreNotJSON(t *testing.T) {
	tmpl, err := LoadTemplate(filepath.Join("testdata", "models", "qwen3-0.6b"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render([]Message{
		{Role: "user", Content: "q"},
		{Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: json.RawMessage(`city=Paris`)}}},
	}, RenderOptions{})
	if err != nil || !strings.Contains(got, `{"name": "f", "arguments": city=Paris}`) {
		t.Errorf("got %q, %v", got, err)
	}
}

func TestStrftimeNowDefaultsToTheClock(t *testing.T) {
	tmpl, err := New("t", `{{ strftime_now("%Y") }}`, SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(nil, RenderOptions{})
	if err != nil || len(got) != 4 || got < "2025" {
		t.Errorf("got %q, %v", got, err)
	}
}

func TestChatMLFallback(t *testing.T) {
	tmpl := ChatML(SpecialTokens{EOS: "</s>"})
	if !tmpl.Fallback() || tmpl.Name() != "chatml" {
		t.Fatalf("Fallback() = %v, Name() = %q", tmpl.Fallback(), tmpl.Name())
	}
	got, err := tmpl.Render([]Message{{Role: "user", Content: "hi"}}, RenderOptions{AddGenerationPrompt: true})
	if want := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"; err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
}

func TestRenderConcurrently(t *testing.T) {
	tmpl, err := LoadTemplate(filepath.Join("testdata", "models", "llama-3.2-1b-instruct"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := tmpl.Render([]Message{{Role: "user", Content: "hi"}}, RenderOptions{Extra: map[string]any{"date_string": "1 Jan 2025"}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				got, err := tmpl.Render([]Message{{Role: "user", Content: "hi"}}, RenderOptions{Extra: map[string]any{"date_string": "1 Jan 2025"}})
				if err != nil || got != want {
					t.Errorf("concurrent render: %q, %v", got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// FuzzTemplate feeds arbitrary template sources through compile and render:
// model folders are untrusted, so neither may panic.
func FuzzTemplate(f *testing.F) {
	for _, m := range []string{"qwen3-0.6b", "qwen2.5-0.5b-instruct", "llama-3.2-1b-instruct", "smollm2-135m-instruct", "mistral-7b-instruct-v0.2", "zephyr-7b-beta", "synthetic-whitespace"} {
		data, err := os.ReadFile(filepath.Join("testdata", "models", m, "tokenizer_config.json"))
		if err != nil {
			f.Fatal(err)
		}
		var tc struct {
			ChatTemplate string `json:"chat_template"`
		}
		if err := json.Unmarshal(data, &tc); err != nil {
			f.Fatal(err)
		}
		f.Add(tc.ChatTemplate)
	}
	f.Add("{% raw %}{{{%- endraw -%}}}{#")
	msgs := []Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u {{ }}"}, {Role: "assistant", Content: "<think>r</think>a"}, {Role: "user", Content: "u2"}}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := New("fuzz", src, SpecialTokens{BOS: "<s>", EOS: "</s>"})
		if err != nil {
			return
		}
		_, _ = tmpl.Render(msgs, RenderOptions{AddGenerationPrompt: true, ToolsJSON: json.RawMessage(`[{"type": "function", "function": {"name": "f"}}]`)})
	})
}
