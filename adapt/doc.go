// Package adapt is the root of Inloop's inference-loop adaptation: policies
// that change a model's adapters while it is being used, one sub-package per
// method —
//
//   - ttt: test-time training, a few LoRA steps on the prompt's context or the
//     nearest chunks of the user's documents on a temporary adapter, discarded
//     after the answer;
//   - ror: reinforce-or-retrain, a confidence-gated step on the user's feedback,
//     checked against an anchor set and rolled back if it hurts;
//   - deltamem: an online memory, a small state per layer that a session writes
//     as it reads and whose readout corrects attention, so what left the
//     context still counts, with no tokens added; it changes no weights, only
//     the session's state, which the Workspace stores in versions;
//   - tao, as DESIGN.md describes it.
//
// Each is a small policy over an *inference.Model and its adapter stack,
// testable on its own. They train with training/trainer's Stepper, time every
// step in milliseconds and report through the trainer's Event callback; the
// Workspace (app) stores what they did and offers undo. They sit between app
// and training: adapt may import training, inference, mlxbridge, internal and
// resources, never app, ui or store (deps_test.go).
package adapt
