package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/inloop/inloop/inference/chat/internal/jinja"
)

// Message is one turn of a conversation, in the shape chat templates read.
// Optional fields are passed to the template only when set, because templates
// test for them with `is defined` and `in message`.
type Message struct {
	Role    string // system, user, assistant or tool
	Content string

	// ReasoningContent is an assistant turn's thinking, apart from its
	// answer (reasoning_content; Qwen3 reads it).
	ReasoningContent string
	// ToolCalls are the calls an assistant turn made.
	ToolCalls []ToolCall
	// ToolCallID and Name tie a tool turn to the call it answers.
	ToolCallID string
	Name       string
}

// ToolCall is one function call made by the assistant, in the OpenAI shape
// templates expect: {id, type: "function", function: {name, arguments}}.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is a JSON object; its keys keep their order. Text that is not
	// JSON is passed to the template as a string.
	Arguments json.RawMessage
}

// RenderOptions are the keyword arguments of apply_chat_template.
type RenderOptions struct {
	// AddGenerationPrompt ends the prompt with the opening of an assistant
	// turn, so the model answers next.
	AddGenerationPrompt bool
	// EnableThinking, when set, is passed as enable_thinking (Qwen3: false
	// asks for an answer without a thinking block).
	EnableThinking *bool
	// Tools are JSON-schema tool definitions. Go maps have no order, so their
	// keys reach the template sorted; use ToolsJSON to keep a given order.
	Tools []map[string]any
	// ToolsJSON, a JSON array of tool definitions, is used instead of Tools
	// when set; object keys keep their order, as in Python.
	ToolsJSON json.RawMessage
	// Extra variables for the template (e.g. date_string for Llama 3); they
	// take precedence over the ones above.
	Extra map[string]any
	// Now is the clock strftime_now reads; zero means the current local time.
	Now time.Time
}

// Template is a model's compiled chat template together with the special
// tokens it prints and the tokens that end a reply. It is safe for concurrent
// use.
type Template struct {
	name     string // "default", "tool_use", ... or "chatml" for the fallback
	file     string // where the source came from
	source   string
	compiled *jinja.Template
	fallback bool
	model    *model
}

// model holds what all templates of one model folder share.
type model struct {
	tokens    SpecialTokens
	idToken   map[int]string // special tokens by id, from added_tokens_decoder
	templates map[string]*Template
	broken    map[string]error // named templates that failed to compile
}

// SpecialTokens are the token strings templates print and the token ids that
// end generation.
type SpecialTokens struct {
	BOS, EOS, PAD, UNK string
	// EOSIDs are generation_config.json's eos_token_id (one or several).
	EOSIDs []int
}

// ErrRaised marks a template that refused the conversation by calling
// raise_exception (e.g. "roles must alternate user/assistant"). The message
// is the template's own.
var ErrRaised = errors.New("template refused the conversation")

// Error is a chat template that failed to parse or render; it names the
// template and where it came from.
type Error struct {
	Template string // e.g. "default", "tool_use", "chatml"
	File     string // the file the template came from, if any
	Op       string // "parse" or "render"
	Err      error
}

func (e *Error) Error() string {
	where := ""
	if e.File != "" {
		where = " (" + e.File + ")"
	}
	if errors.Is(e.Err, ErrTooExpensive) {
		return fmt.Sprintf("chat template too expensive: %v (template %q%s)", e.Err, e.Template, where)
	}
	return fmt.Sprintf("chat template %q%s: %s: %v", e.Template, where, e.Op, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrTooExpensive marks a render that went past its budget: too many steps
// (a loop or recursion too long), too many bytes built, an output or string
// too long, macros nested too deeply, or more than the time allowed (see
// renderLimits). Templates come from model folders: a hostile or broken one
// fails this way, in about a second at most, instead of hanging or taking
// the process down.
var ErrTooExpensive = errors.New("chat template too expensive")

// expensiveError wraps the engine's account of which limit was passed.
type expensiveError struct{ err error }

func (e *expensiveError) Error() string        { return e.err.Error() }
func (e *expensiveError) Unwrap() error        { return e.err }
func (e *expensiveError) Is(target error) bool { return target == ErrTooExpensive }

// renderLimits is the budget of one render. It grows with the conversation,
// which templates copy a few times (concatenations, the output), so a long
// chat fits; what a template can add on its own stays bounded: a million
// steps (at most about half a second of the engine on this machine, where a
// real template takes 30 µs and a few hundred steps), 64 MiB of strings and
// lists, a 16 MiB prompt, 100 nested macro calls, and a second of wall clock.
func renderLimits(msgs []Message, opts RenderOptions) jinja.Limits {
	in := int64(len(opts.ToolsJSON))
	for _, m := range msgs {
		in += int64(len(m.Content) + len(m.ReasoningContent) + len(m.Role) + len(m.Name) + len(m.ToolCallID))
		for _, c := range m.ToolCalls {
			in += int64(len(c.Arguments) + len(c.Name) + len(c.ID))
		}
	}
	return jinja.Limits{
		Steps:   1_000_000 + 1_000*int64(len(msgs)) + in/16,
		Bytes:   64<<20 + 32*in,
		Output:  16<<20 + 4*in,
		Depth:   100,
		Timeout: time.Second,
	}
}

// raisedError is what a template's raise_exception call turns into.
type raisedError struct{ msg string }

// Error quotes the template's words, cut to a sane length: they come from a
// model folder and are printed on terminals.
func (e *raisedError) Error() string {
	const max = 1000
	msg := e.msg
	if len(msg) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "..."
	}
	return strconv.Quote(msg)
}
func (e *raisedError) Is(target error) bool { return target == ErrRaised }

// New compiles a chat template from source. name identifies it in errors.
func New(name, source string, tokens SpecialTokens) (*Template, error) {
	m := &model{tokens: tokens, templates: map[string]*Template{}}
	t, err := m.compile(name, "", source)
	if err != nil {
		return nil, err
	}
	m.templates[name] = t
	return t, nil
}

// chatMLSource is transformers' historical default template (ChatML), used
// when a model ships none.
const chatMLSource = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// ChatML returns the fallback template for models without one of their own.
// Its Fallback method reports true so that the UI can warn that the model
// was probably not trained on this format.
func ChatML(tokens SpecialTokens) *Template {
	t, err := New("chatml", chatMLSource, tokens)
	if err != nil {
		panic(err) // the source is a constant
	}
	t.fallback = true
	return t
}

func (m *model) compile(name, file, source string) (*Template, error) {
	prepared, err := prepareSource(source)
	if err == nil {
		var c *jinja.Template
		if c, err = compileSafely(prepared); err == nil {
			return &Template{name: name, file: file, source: source, compiled: c, model: m}, nil
		}
	}
	return nil, &Error{Template: name, File: file, Op: "parse", Err: err}
}

// compileSafely and renderSafely turn a panic inside the engine into an
// error: templates come from downloaded model folders.
func compileSafely(src string) (t *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("template engine failed: %v", r)
		}
	}()
	return jinja.Compile(src)
}

func renderSafely(t *jinja.Template, data map[string]jinja.Value, b *jinja.Budget) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("template engine failed: %v", r)
		}
	}()
	out, err = t.RenderBudget(data, b)
	if errors.Is(err, jinja.ErrBudget) {
		err = &expensiveError{err}
	}
	return out, err
}

// Name is the template's name: "default", another name the model gives it
// (such as "tool_use"), or "chatml" for the fallback.
func (t *Template) Name() string { return t.name }

// Source is the template text as the model ships it.
func (t *Template) Source() string { return t.source }

// Fallback reports whether the model had no chat template and this is the
// generic ChatML one.
func (t *Template) Fallback() bool { return t.fallback }

// Tokens returns the model's special tokens.
func (t *Template) Tokens() SpecialTokens {
	tok := t.model.tokens
	tok.EOSIDs = slices.Clone(tok.EOSIDs)
	return tok
}

// Names lists the model's templates, "default" first.
func (t *Template) Names() []string {
	var names []string
	for n := range t.model.templates {
		names = append(names, n)
	}
	for n := range t.model.broken {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if (names[i] == "default") != (names[j] == "default") {
			return names[i] == "default"
		}
		return names[i] < names[j]
	})
	return names
}

// Named returns the model's template of that name, e.g. "tool_use".
func (t *Template) Named(name string) (*Template, error) {
	if nt, ok := t.model.templates[name]; ok {
		return nt, nil
	}
	if err, ok := t.model.broken[name]; ok {
		return nil, err
	}
	return nil, fmt.Errorf("chat: the model has no template named %q (it has %q)", name, t.Names())
}

// EOSTokens returns the ids that end a reply: generation_config.json's
// eos_token_id (often several, e.g. Llama 3's <|end_of_text|>, <|eom_id|>,
// <|eot_id|>), then config.json's, then the eos_token's own id.
func (t *Template) EOSTokens() []int { return slices.Clone(t.model.tokens.EOSIDs) }

// StopStrings returns the texts that end a reply: the eos_token, the text of
// every EOS id the tokenizer config names, and for the ChatML fallback
// <|im_end|>. Generation should stop at the first of them.
func (t *Template) StopStrings() []string {
	var out []string
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	add(t.model.tokens.EOS)
	for _, id := range t.model.tokens.EOSIDs {
		add(t.model.idToken[id])
	}
	if t.fallback {
		add("<|im_end|>")
	}
	return out
}

// Render formats msgs as the prompt the model expects, as transformers'
// apply_chat_template(msgs, tokenize=False, ...) does. Given tools, the
// default template defers to the model's "tool_use" template if it has one,
// as transformers does.
func (t *Template) Render(msgs []Message, opts RenderOptions) (string, error) {
	if t.name == "default" && (len(opts.Tools) > 0 || len(opts.ToolsJSON) > 0) {
		if tu, ok := t.model.templates["tool_use"]; ok {
			t = tu
		}
	}
	fail := func(err error) (string, error) {
		return "", &Error{Template: t.name, File: t.file, Op: "render", Err: err}
	}

	messages, err := messageValues(msgs)
	if err != nil {
		return fail(err)
	}
	tools := jinja.None()
	switch {
	case len(opts.ToolsJSON) > 0:
		if tools, err = jsonValue(opts.ToolsJSON); err != nil {
			return fail(fmt.Errorf("tools: %w", err))
		}
		if !tools.IsList() {
			return fail(errors.New("tools: ToolsJSON is not a JSON array"))
		}
	case len(opts.Tools) > 0:
		if tools, err = goValue(opts.Tools); err != nil {
			return fail(fmt.Errorf("tools: %w", err))
		}
	}

	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	budget := jinja.NewBudget(renderLimits(msgs, opts))
	var raised *raisedError
	data := map[string]jinja.Value{
		"messages":              messages,
		"tools":                 tools,
		"documents":             jinja.None(),
		"add_generation_prompt": jinja.NewBool(opts.AddGenerationPrompt),
		"raise_exception": jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			msg := "raise_exception called"
			if len(args) > 0 {
				msg = valueText(budget, args[0])
			}
			raised = &raisedError{msg: msg}
			return jinja.Undefined(), raised
		}),
		"strftime_now": jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if len(args) == 0 || !args[0].IsString() {
				return jinja.Undefined(), errors.New("strftime_now: expected a format string")
			}
			budget.Grow(0, 5*len(args[0].AsString())) // "%A" becomes "Wednesday"
			return jinja.NewString(strftime(args[0].AsString(), now)), nil
		}),
	}
	tok := t.model.tokens
	for name, s := range map[string]string{"bos_token": tok.BOS, "eos_token": tok.EOS, "pad_token": tok.PAD, "unk_token": tok.UNK} {
		if s != "" {
			data[name] = jinja.NewString(s)
		}
	}
	if opts.EnableThinking != nil {
		data["enable_thinking"] = jinja.NewBool(*opts.EnableThinking)
	}
	for k, v := range opts.Extra {
		val, err := goValue(v)
		if err != nil {
			return fail(fmt.Errorf("extra %s: %w", k, err))
		}
		data[k] = val
	}
	data[tojsonFilter] = jinja.NewCallable(tojsonFilter, func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
		return pyTojson(budget, args, kwargs)
	})

	out, err := renderSafely(t.compiled, data, budget)
	if err != nil {
		if raised != nil {
			return fail(raised)
		}
		return fail(err)
	}
	return out, nil
}

// valueText is how Jinja prints a value into an exception message.
func valueText(b *jinja.Budget, v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	s := v.String()
	b.Grow(0, len(s))
	return s
}

// messageValues builds the template's messages list. Keys are set in the
// order role, content, then the optional ones, and only when present.
func messageValues(msgs []Message) (jinja.Value, error) {
	items := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		dd := d.AsDict()
		dd.Set("role", jinja.NewString(m.Role))
		dd.Set("content", jinja.NewString(m.Content))
		if m.ReasoningContent != "" {
			dd.Set("reasoning_content", jinja.NewString(m.ReasoningContent))
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]jinja.Value, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				args := jinja.NewString(string(c.Arguments))
				if json.Valid(c.Arguments) {
					v, err := jsonValue(c.Arguments)
					if err != nil {
						return jinja.Undefined(), fmt.Errorf("message %d: tool call %d: %w", i, j, err)
					}
					args = v
				}
				fn := jinja.NewDict()
				fn.AsDict().Set("name", jinja.NewString(c.Name))
				fn.AsDict().Set("arguments", args)
				call := jinja.NewDict()
				if c.ID != "" {
					call.AsDict().Set("id", jinja.NewString(c.ID))
				}
				call.AsDict().Set("type", jinja.NewString("function"))
				call.AsDict().Set("function", fn)
				calls[j] = call
			}
			dd.Set("tool_calls", jinja.NewList(calls))
		}
		if m.ToolCallID != "" {
			dd.Set("tool_call_id", jinja.NewString(m.ToolCallID))
		}
		if m.Name != "" {
			dd.Set("name", jinja.NewString(m.Name))
		}
		items[i] = d
	}
	return jinja.NewList(items), nil
}
