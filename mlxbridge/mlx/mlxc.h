// Our own declarations of the mlx-c functions the mlx backend calls, written from
// the public C API: every mlx-c object is one opaque pointer passed by value,
// functions return 0 on success and hand results back through out-parameters.
// Nothing is linked at build time; mlxc.c resolves the symbols with dlsym and the
// wrappers below (mlxc_<name> for mlx_<name>) call through the resolved pointers.

#ifndef INLOOP_MLXC_H
#define INLOOP_MLXC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct { void* ctx; } mlxc_array;
typedef struct { void* ctx; } mlxc_stream;
typedef struct { void* ctx; } mlxc_vector;  // a vector of arrays
typedef struct { void* ctx; } mlxc_string;
typedef struct { void* ctx; } mlxc_closure;
typedef struct { void* ctx; } mlxc_vag;     // a value-and-grad closure

typedef struct { int value; bool has_value; } mlxc_opt_int;
typedef struct { float value; bool has_value; } mlxc_opt_float;
typedef struct { int value; bool has_value; } mlxc_opt_dtype;

typedef int (*mlxc_closure_fn)(mlxc_vector* out, const mlxc_vector in, void* payload);

#define MLXC_S const mlxc_stream s
#define MLXC_UNARY(X, n) X(int, n, (mlxc_array* r, const mlxc_array a, MLXC_S), (r, a, s))
#define MLXC_BINARY(X, n) \
  X(int, n, (mlxc_array* r, const mlxc_array a, const mlxc_array b, MLXC_S), (r, a, b, s))

// X(return type, name without the mlx_ prefix, parameters, arguments)
#define MLXC_FUNCS(X)                                                                         \
  X(int, version, (mlxc_string* r), (r))                                                      \
  X(mlxc_string, string_new, (void), ())                                                      \
  X(const char*, string_data, (mlxc_string str), (str))                                       \
  X(int, string_free, (mlxc_string str), (str))                                               \
  X(int, array_free, (mlxc_array a), (a))                                                     \
  X(int, array_set, (mlxc_array* r, const mlxc_array src), (r, src))                          \
  X(mlxc_array, array_new_data, (const void* data, const int* shape, int dim, int dtype),     \
    (data, shape, dim, dtype))                                                                \
  X(size_t, array_ndim, (const mlxc_array a), (a))                                            \
  X(const int*, array_shape, (const mlxc_array a), (a))                                       \
  X(int, array_dtype, (const mlxc_array a), (a))                                              \
  X(size_t, array_size, (const mlxc_array a), (a))                                            \
  X(int, array_eval, (mlxc_array a), (a))                                                     \
  X(const float*, array_data_float32, (const mlxc_array a), (a))                              \
  X(const int32_t*, array_data_int32, (const mlxc_array a), (a))                              \
  X(const uint32_t*, array_data_uint32, (const mlxc_array a), (a))                            \
  X(const uint8_t*, array_data_uint8, (const mlxc_array a), (a))                              \
  X(const bool*, array_data_bool, (const mlxc_array a), (a))                                  \
  X(mlxc_vector, vector_array_new, (void), ())                                                \
  X(int, vector_array_free, (mlxc_vector v), (v))                                             \
  X(mlxc_vector, vector_array_new_data, (const mlxc_array* data, size_t n), (data, n))        \
  X(int, vector_array_set_data, (mlxc_vector* v, const mlxc_array* data, size_t n),          \
    (v, data, n))                                                                             \
  X(size_t, vector_array_size, (mlxc_vector v), (v))                                          \
  X(int, vector_array_get, (mlxc_array* r, const mlxc_vector v, size_t i), (r, v, i))         \
  X(mlxc_stream, default_cpu_stream_new, (void), ())                                          \
  X(mlxc_stream, default_gpu_stream_new, (void), ())                                          \
  X(int, stream_free, (mlxc_stream st), (st))                                                 \
  X(int, synchronize, (mlxc_stream st), (st))                                                 \
  X(int, metal_is_available, (bool* r), (r))                                                  \
  X(int, get_active_memory, (size_t* r), (r))                                                 \
  X(int, get_peak_memory, (size_t* r), (r))                                                   \
  X(int, get_cache_memory, (size_t* r), (r))                                                  \
  X(int, reset_peak_memory, (void), ())                                                       \
  X(int, clear_cache, (void), ())                                                             \
  X(int, set_cache_limit, (size_t* r, size_t limit), (r, limit))                              \
  X(int, set_memory_limit, (size_t* r, size_t limit), (r, limit))                             \
  MLXC_UNARY(X, negative) MLXC_UNARY(X, exp) MLXC_UNARY(X, log) MLXC_UNARY(X, sqrt)           \
  MLXC_UNARY(X, rsqrt) MLXC_UNARY(X, sigmoid) MLXC_UNARY(X, tanh) MLXC_UNARY(X, abs)          \
  MLXC_UNARY(X, square) MLXC_UNARY(X, sign) MLXC_UNARY(X, erf) MLXC_UNARY(X, cos)             \
  MLXC_UNARY(X, sin)                                                                          \
  MLXC_BINARY(X, add) MLXC_BINARY(X, subtract) MLXC_BINARY(X, multiply)                       \
  MLXC_BINARY(X, divide) MLXC_BINARY(X, maximum) MLXC_BINARY(X, minimum)                      \
  MLXC_BINARY(X, power) MLXC_BINARY(X, greater) MLXC_BINARY(X, greater_equal)                 \
  MLXC_BINARY(X, less) MLXC_BINARY(X, equal) MLXC_BINARY(X, not_equal)                        \
  MLXC_BINARY(X, matmul)                                                                      \
  X(int, sum_axes, (mlxc_array* r, const mlxc_array a, const int* axes, size_t n, bool keep,  \
    MLXC_S), (r, a, axes, n, keep, s))                                                        \
  X(int, max_axes, (mlxc_array* r, const mlxc_array a, const int* axes, size_t n, bool keep,  \
    MLXC_S), (r, a, axes, n, keep, s))                                                        \
  X(int, min_axes, (mlxc_array* r, const mlxc_array a, const int* axes, size_t n, bool keep,  \
    MLXC_S), (r, a, axes, n, keep, s))                                                        \
  X(int, sort_axis, (mlxc_array* r, const mlxc_array a, int axis, MLXC_S), (r, a, axis, s))   \
  X(int, cumsum, (mlxc_array* r, const mlxc_array a, int axis, bool reverse, bool inclusive,  \
    MLXC_S), (r, a, axis, reverse, inclusive, s))                                             \
  X(int, argmax_axis, (mlxc_array* r, const mlxc_array a, int axis, bool keep, MLXC_S),       \
    (r, a, axis, keep, s))                                                                    \
  X(int, swapaxes, (mlxc_array* r, const mlxc_array a, int a1, int a2, MLXC_S),               \
    (r, a, a1, a2, s))                                                                        \
  X(int, reshape, (mlxc_array* r, const mlxc_array a, const int* shape, size_t n, MLXC_S),    \
    (r, a, shape, n, s))                                                                      \
  X(int, transpose_axes, (mlxc_array* r, const mlxc_array a, const int* axes, size_t n,       \
    MLXC_S), (r, a, axes, n, s))                                                              \
  X(int, broadcast_to, (mlxc_array* r, const mlxc_array a, const int* shape, size_t n,        \
    MLXC_S), (r, a, shape, n, s))                                                             \
  X(int, slice, (mlxc_array* r, const mlxc_array a, const int* start, size_t ns,              \
    const int* stop, size_t ne, const int* step, size_t nk, MLXC_S),                          \
    (r, a, start, ns, stop, ne, step, nk, s))                                                 \
  X(int, slice_update, (mlxc_array* r, const mlxc_array a, const mlxc_array u,                \
    const int* start, size_t ns, const int* stop, size_t ne, const int* step, size_t nk,      \
    MLXC_S), (r, a, u, start, ns, stop, ne, step, nk, s))                                     \
  X(int, concatenate_axis, (mlxc_array* r, const mlxc_vector xs, int axis, MLXC_S),           \
    (r, xs, axis, s))                                                                         \
  X(int, take_axis, (mlxc_array* r, const mlxc_array a, const mlxc_array idx, int axis,       \
    MLXC_S), (r, a, idx, axis, s))                                                            \
  X(int, take_along_axis, (mlxc_array* r, const mlxc_array a, const mlxc_array idx,           \
    int axis, MLXC_S), (r, a, idx, axis, s))                                                  \
  X(int, scatter_add, (mlxc_array* r, const mlxc_array a, const mlxc_vector idx,              \
    const mlxc_array upd, const int* axes, size_t n, MLXC_S), (r, a, idx, upd, axes, n, s))   \
  X(int, scatter_add_axis, (mlxc_array* r, const mlxc_array a, const mlxc_array idx,          \
    const mlxc_array upd, int axis, MLXC_S), (r, a, idx, upd, axis, s))                       \
  X(int, where, (mlxc_array* r, const mlxc_array c, const mlxc_array a, const mlxc_array b,   \
    MLXC_S), (r, c, a, b, s))                                                                 \
  X(int, stop_gradient, (mlxc_array* r, const mlxc_array a, MLXC_S), (r, a, s))               \
  X(int, astype, (mlxc_array* r, const mlxc_array a, int dtype, MLXC_S), (r, a, dtype, s))    \
  X(int, zeros, (mlxc_array* r, const int* shape, size_t n, int dtype, MLXC_S),               \
    (r, shape, n, dtype, s))                                                                  \
  X(int, contiguous, (mlxc_array* r, const mlxc_array a, bool col_major, MLXC_S),             \
    (r, a, col_major, s))                                                                     \
  X(int, softmax_axis, (mlxc_array* r, const mlxc_array a, int axis, bool precise, MLXC_S),   \
    (r, a, axis, precise, s))                                                                 \
  X(int, logsumexp_axis, (mlxc_array* r, const mlxc_array a, int axis, bool keep, MLXC_S),    \
    (r, a, axis, keep, s))                                                                    \
  X(int, quantize, (mlxc_vector* r, const mlxc_array w, mlxc_opt_int group, mlxc_opt_int bits,\
    const char* mode, const mlxc_array global_scale, MLXC_S),                                 \
    (r, w, group, bits, mode, global_scale, s))                                               \
  X(int, dequantize, (mlxc_array* r, const mlxc_array w, const mlxc_array scales,             \
    const mlxc_array biases, mlxc_opt_int group, mlxc_opt_int bits, const char* mode,         \
    const mlxc_array global_scale, mlxc_opt_dtype dtype, MLXC_S),                             \
    (r, w, scales, biases, group, bits, mode, global_scale, dtype, s))                        \
  X(int, quantized_matmul, (mlxc_array* r, const mlxc_array x, const mlxc_array w,            \
    const mlxc_array scales, const mlxc_array biases, bool transpose, mlxc_opt_int group,     \
    mlxc_opt_int bits, const char* mode, MLXC_S),                                             \
    (r, x, w, scales, biases, transpose, group, bits, mode, s))                               \
  X(int, fast_rms_norm, (mlxc_array* r, const mlxc_array x, const mlxc_array w, float eps,    \
    MLXC_S), (r, x, w, eps, s))                                                               \
  X(int, fast_rope, (mlxc_array* r, const mlxc_array x, int dims, bool traditional,           \
    mlxc_opt_float base, float scale, int offset, const mlxc_array freqs, MLXC_S),            \
    (r, x, dims, traditional, base, scale, offset, freqs, s))                                 \
  X(int, fast_scaled_dot_product_attention, (mlxc_array* r, const mlxc_array q,               \
    const mlxc_array k, const mlxc_array v, float scale, const char* mask_mode,               \
    const mlxc_array mask, const mlxc_array sinks, MLXC_S),                                   \
    (r, q, k, v, scale, mask_mode, mask, sinks, s))                                           \
  X(int, eval, (const mlxc_vector xs), (xs))                                                  \
  X(int, async_eval, (const mlxc_vector xs), (xs))                                            \
  X(mlxc_closure, closure_new_func_payload, (mlxc_closure_fn f, void* payload,                \
    void (*dtor)(void*)), (f, payload, dtor))                                                 \
  X(int, closure_free, (mlxc_closure c), (c))                                                 \
  X(int, value_and_grad, (mlxc_vag* r, const mlxc_closure f, const int* argnums, size_t n),   \
    (r, f, argnums, n))                                                                       \
  X(int, closure_value_and_grad_apply, (mlxc_vector* values, mlxc_vector* grads,              \
    mlxc_vag f, const mlxc_vector in), (values, grads, f, in))                                \
  X(int, closure_value_and_grad_free, (mlxc_vag f), (f))

// Symbols that may be absent; callers test mlxc_has_<name>() first.
#define MLXC_OPTIONAL(X)                                                     \
  X(int, device_count, (int* r, int device_type), (r, device_type))          \
  X(int, set_default_stream, (mlxc_stream st), (st))                         \
  X(int, compile, (mlxc_closure* r, const mlxc_closure f, bool shapeless),   \
    (r, f, shapeless))                                                       \
  X(int, closure_apply, (mlxc_vector* r, mlxc_closure f,                     \
    const mlxc_vector in), (r, f, in))                                       \
  X(int, set_compile_mode, (int mode), (mode))

#define MLXC_DECLARE(ret, name, params, args) ret mlxc_##name params;
MLXC_FUNCS(MLXC_DECLARE)
MLXC_OPTIONAL(MLXC_DECLARE)
#undef MLXC_DECLARE
#define MLXC_DECLARE_HAS(ret, name, params, args) int mlxc_has_##name(void);
MLXC_OPTIONAL(MLXC_DECLARE_HAS)
#undef MLXC_DECLARE_HAS

// mlxc_probe_symbol is the function that first appeared in mlx-c 0.6.0.
extern const char* const mlxc_probe_symbol;

// mlxc_open dlopens path; on failure it returns NULL and copies dlerror to err.
void* mlxc_open(const char* path, char* err, size_t n);
void mlxc_close(void* lib);
// mlxc_has reports whether lib exports name.
int mlxc_has(void* lib, const char* name);
// mlxc_lib_version writes the library's mlx_version string to buf (empty on failure).
void mlxc_lib_version(void* lib, char* buf, size_t n);
// mlxc_bind resolves every required symbol of lib into the call table and
// installs the capturing error handler. It returns NULL, or the first missing name.
const char* mlxc_bind(void* lib);

// The capturing error handler keeps the last message per thread.
const char* mlxc_last_error(void);
void mlxc_clear_error(void);

// Worker-thread identity, for running nested calls directly.
void mlxc_set_worker(void);
int mlxc_on_worker(void);

// mlxc_closure_for wraps the exported Go callback with a cgo.Handle payload.
mlxc_closure mlxc_closure_for(uintptr_t handle);

// mlxc_apply calls closure f on the n arrays of in and leaves its outputs in *out
// (which the caller frees): one call for building the input vector, applying f and
// freeing the vector again.
int mlxc_apply(mlxc_closure f, const mlxc_array* in, size_t n, mlxc_vector* out);

// The compile mode (of the mlx_compile_mode enum) in which MLX's compile keeps the ops
// it traced, only merging duplicates, instead of also fusing elementwise chains.
enum { MLXC_COMPILE_NO_FUSE = 2 };

// mlxc_rope_step is log(base) / half in single precision, computed as MLX's RoPE computes
// the step of its inverse frequencies (std::log of a float), so a table of its angles holds
// the same bits as MLX's own.
float mlxc_rope_step(float base, int half);

#endif
