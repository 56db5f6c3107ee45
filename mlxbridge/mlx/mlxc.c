//go:build cgo && (darwin || linux)

// The run-time binding to libmlxc: dlopen, a table of function pointers filled
// by dlsym, thin wrappers that call through it, and the capturing error handler.

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "mlxc.h"
#include "_cgo_export.h"

const char* const mlxc_probe_symbol = "mlx_bartlett";

#define MLXC_POINTER(ret, name, params, args) static ret(*p_##name) params;
MLXC_FUNCS(MLXC_POINTER)
MLXC_OPTIONAL(MLXC_POINTER)
#undef MLXC_POINTER

#define MLXC_WRAP(ret, name, params, args) \
  ret mlxc_##name params { return p_##name args; }
MLXC_FUNCS(MLXC_WRAP)
MLXC_OPTIONAL(MLXC_WRAP)
#undef MLXC_WRAP

#define MLXC_HAS(ret, name, params, args) \
  int mlxc_has_##name(void) { return p_##name != NULL; }
MLXC_OPTIONAL(MLXC_HAS)
#undef MLXC_HAS

void* mlxc_open(const char* path, char* err, size_t n) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char* e = dlerror();
    snprintf(err, n, "%s", e ? e : "dlopen failed");
  }
  return lib;
}

void mlxc_close(void* lib) { dlclose(lib); }

int mlxc_has(void* lib, const char* name) { return dlsym(lib, name) != NULL; }

void mlxc_lib_version(void* lib, char* buf, size_t n) {
  int (*version)(mlxc_string*) = NULL;
  mlxc_string (*string_new)(void) = NULL;
  const char* (*string_data)(mlxc_string) = NULL;
  int (*string_free)(mlxc_string) = NULL;
  *(void**)(&version) = dlsym(lib, "mlx_version");
  *(void**)(&string_new) = dlsym(lib, "mlx_string_new");
  *(void**)(&string_data) = dlsym(lib, "mlx_string_data");
  *(void**)(&string_free) = dlsym(lib, "mlx_string_free");
  buf[0] = 0;
  if (!version || !string_new || !string_data || !string_free) {
    return;
  }
  mlxc_string s = string_new();
  if (version(&s) == 0) {
    const char* d = string_data(s);
    snprintf(buf, n, "%s", d ? d : "");
  }
  string_free(s);
}

// The handler's data argument is not used: mlx-c keeps it only when a destructor
// is given, so the message goes to a per-thread buffer instead.
static __thread char last_error[4096];
static __thread int has_error;

static void capture_error(const char* msg, void* data) {
  (void)data;
  snprintf(last_error, sizeof last_error, "%s", msg ? msg : "unknown error");
  has_error = 1;
}

const char* mlxc_last_error(void) { return has_error ? last_error : NULL; }

void mlxc_clear_error(void) {
  has_error = 0;
  last_error[0] = 0;
}

const char* mlxc_bind(void* lib) {
#define MLXC_CHECK(ret, name, params, args) \
  if (dlsym(lib, "mlx_" #name) == NULL) return "mlx_" #name;
  MLXC_FUNCS(MLXC_CHECK)
#undef MLXC_CHECK
  void (*set_handler)(void (*)(const char*, void*), void*, void (*)(void*)) = NULL;
  *(void**)(&set_handler) = dlsym(lib, "mlx_set_error_handler");
  if (set_handler == NULL) return "mlx_set_error_handler";
#define MLXC_RESOLVE(ret, name, params, args) *(void**)(&p_##name) = dlsym(lib, "mlx_" #name);
  MLXC_FUNCS(MLXC_RESOLVE)
  MLXC_OPTIONAL(MLXC_RESOLVE)
#undef MLXC_RESOLVE
  set_handler(capture_error, NULL, NULL);
  return NULL;
}

static pthread_t worker;
static int have_worker;

void mlxc_set_worker(void) {
  worker = pthread_self();
  have_worker = 1;
}

int mlxc_on_worker(void) { return have_worker && pthread_equal(worker, pthread_self()); }

static int closure_trampoline(mlxc_vector* out, const mlxc_vector in, void* payload) {
  return goClosureCall(out, in, (uintptr_t)payload);
}

mlxc_closure mlxc_closure_for(uintptr_t handle) {
  return mlxc_closure_new_func_payload(closure_trampoline, (void*)handle, NULL);
}

int mlxc_apply(mlxc_closure f, const mlxc_array* in, size_t n, mlxc_vector* out) {
  mlxc_vector v = mlxc_vector_array_new_data(in, n);
  int rc = mlxc_closure_apply(out, f, v);
  mlxc_vector_array_free(v);
  return rc;
}

float mlxc_rope_step(float base, int half) { return logf(base) / (float)half; }
