package blas

// Which kernels OpenBLAS runs. Distributions ship OpenBLAS built for many processors at
// once (DYNAMIC_ARCH); it picks its kernels when it loads, by the processor's model
// number. A processor newer than the build is not in its table, and then it falls back
// to its oldest x86-64 kernels (SSE3, "Prescott"), whatever the processor can do. Debian
// 12's OpenBLAS 0.3.21 does that on a 5th-generation Xeon (model 207, AVX-512): sgemm
// 1024³ ran at 25–31 GFLOP/s on two cores instead of 150–170 with its AVX-512 kernels.
// llama.cpp and MLX's own kernels are compiled for the processor, so every product of
// ours ran five times slower than theirs on such a machine.
//
// So when this package loads (before any product, before MLX is loaded), if the user has
// not chosen (OPENBLAS_CORETYPE) and OpenBLAS fell back to a core without AVX on a
// processor that has AVX2 and FMA (enabled by the operating system), the kernels are
// chosen again by what the processor supports: AVX-512 (F, CD, BW, DQ, VL) takes
// OpenBLAS's SkylakeX kernels, AVX2 with FMA its Haswell ones. A core OpenBLAS did
// recognise is left as it is, as is a build for one processor only (no run-time choice).

/*
#cgo linux LDFLAGS: -ldl
#include <stdlib.h>
#include <string.h>
#ifdef __APPLE__
static const char *inloop_blas_core(void) { return ""; }
static int inloop_blas_choose(const char *core) { (void)core; return 0; }
static int inloop_cpu_level(void) { return 0; }
#else
#include <dlfcn.h>
#include <cblas.h>

static const char *inloop_blas_core(void) { return openblas_get_corename(); }

// Asks OpenBLAS to choose its kernels again, as core; 0 where it cannot (a build for one
// processor has no run-time choice).
static int inloop_blas_choose(const char *core) {
	void (*quit)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit");
	void (*init)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init");
	if (!quit || !init) return 0;
	char *was = getenv("OPENBLAS_CORETYPE");
	char *keep = was ? strdup(was) : NULL;
	setenv("OPENBLAS_CORETYPE", core, 1);
	quit();
	init();
	if (keep) {
		setenv("OPENBLAS_CORETYPE", keep, 1);
		free(keep);
	} else {
		unsetenv("OPENBLAS_CORETYPE");
	}
	return 1;
}

// 3: AVX-512 F/CD/BW/DQ/VL, 2: AVX2 and FMA, 1: AVX, 0: less (or not x86-64). GCC's and
// clang's checks count a feature only where the operating system saves its registers.
static int inloop_cpu_level(void) {
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
		return 3;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
	if (__builtin_cpu_supports("avx")) return 1;
#endif
	return 0;
}
#endif
*/
import "C"

import (
	"os"
	"strings"
	"unsafe"
)

// preAVX are OpenBLAS's x86 cores whose kernels use no AVX: what it falls back to.
var preAVX = map[string]bool{"prescott": true, "core2": true, "penryn": true, "dunnington": true, "nehalem": true,
	"atom": true, "katmai": true, "coppermine": true, "northwood": true, "banias": true, "athlon": true,
	"opteron": true, "opteron(sse3)": true, "barcelona": true, "bobcat": true, "nano": true, "unknown": true}

// coreFor is OpenBLAS's core for a processor of level inloop_cpu_level.
var coreFor = map[int]string{3: "SkylakeX", 2: "Haswell"}

// kernels says how OpenBLAS's kernels were chosen: "" where by OpenBLAS itself (or the
// user), else what Inloop found and chose.
var kernels string

func init() { kernels = chooseKernels() }

func chooseKernels() string {
	if os.Getenv("OPENBLAS_CORETYPE") != "" {
		return ""
	}
	was := Core()
	want, ok := coreFor[cpuLevel()]
	if !ok || !preAVX[strings.ToLower(was)] {
		return ""
	}
	if !chooseCore(want) {
		return ""
	}
	if now := Core(); !strings.EqualFold(now, want) {
		chooseCore(was) // not taken: back to what it had
		return ""
	}
	return "chosen by Inloop: OpenBLAS took this processor for a " + was
}

// cpuLevel is 3 for AVX-512 (F, CD, BW, DQ, VL), 2 for AVX2 with FMA, 1 for AVX, else 0.
func cpuLevel() int { return int(C.inloop_cpu_level()) }

// chooseCore makes OpenBLAS run core's kernels; false where it cannot choose at run time.
func chooseCore(core string) bool {
	cs := C.CString(core)
	defer C.free(unsafe.Pointer(cs))
	return C.inloop_blas_choose(cs) != 0
}

// Core is the processor OpenBLAS runs its kernels for ("" where BLAS is Accelerate).
func Core() string { return C.GoString(C.inloop_blas_core()) }

// Describe names the BLAS and its kernels, for `inloop doctor`.
func Describe() string {
	c := Core()
	if c == "" {
		return "Accelerate"
	}
	s := "OpenBLAS, " + c + " kernels"
	if kernels != "" {
		s += ", " + kernels
	}
	return s
}
