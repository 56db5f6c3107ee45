// Package chat turns a conversation into the exact prompt string a model was
// trained on, using the model's own Jinja chat template from its Hugging Face
// folder (tokenizer_config.json, chat_template.jinja), and says where
// generation must stop (the model's EOS tokens and stop strings).
//
// Templates are rendered by internal/jinja, a fork of github.com/ardanlabs/jinja
// v1.8.0 (see its README for why and what changed), inside an environment
// that reproduces what transformers' apply_chat_template sets up: Jinja2's
// trim_blocks and lstrip_blocks, no trailing newline, Python's json.dumps for
// tojson, and the raise_exception and strftime_now globals. Rendered prompts
// are checked byte for byte against goldens from an independent engine
// (testdata/render_goldens.mjs).
package chat
