// Package data turns the user's material into training examples: JSONL files in
// mlx-lm's formats (text, prompt/completion, chat messages, and train/valid/test
// folders), and folders of ordinary documents chunked by tokens and kept current
// while the user edits them. Every example carries a loss mask, so prompts are
// read but not learned. Batches group examples of similar length, pad them, cut
// over-long ones (and say how much was cut), and come in a seeded order that a
// checkpoint can resume exactly.
//
// The package knows nothing of any particular model: the trainer plugs in the
// model's tokenizer and chat template through the small Tokenizer and Renderer
// interfaces.
package data
