// Package mlxbridge is Inloop's compute boundary: n-d arrays, functional ops and
// reverse-mode gradients in MLX's style, behind one API with interchangeable backends.
//
// Model, training and adaptation code is written once against this package. A backend
// (package mlxbridge/cpu, or mlx on a Mac) registers itself by name, in the manner of
// database/sql drivers, and supplies kernels; this package validates shapes, infers
// result shapes and dtypes, records the autodiff graph and composes the ops a backend
// does not provide natively (see the optional interfaces in backend.go).
//
// Errors are sticky, like bufio.Scanner's: an op whose inputs do not fit returns an
// Array carrying the error, every op that consumes it passes the error on, and Err,
// Eval, the readback methods and ValueAndGrad report it. Model code stays a readable
// sequence of ops and still never panics on a bad shape.
package mlxbridge
