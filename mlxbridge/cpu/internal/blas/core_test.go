package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestKernelsFitProcessor checks, in fresh processes, how OpenBLAS's kernels are chosen:
//   - with no choice of the user's, a processor with AVX2 and FMA never runs kernels
//     without AVX (OpenBLAS's fallback for a processor it does not know);
//   - the user's OPENBLAS_CORETYPE is kept as it is, even an old core;
//   - the fallback, forced, is replaced by the kernels the processor supports, and
//     products are still right after the change.
func TestKernelsFitProcessor(t *testing.T) {
	switch os.Getenv("INLOOP_BLAS_CORE_HELPER") {
	case "":
	case "plain":
		fmt.Printf("core %q level %d kernels %q\n", Core(), cpuLevel(), kernels)
		return
	case "fallback": // as OpenBLAS does for a processor it does not know
		if !chooseCore("Prescott") || Core() != "Prescott" {
			fmt.Printf("no run-time choice\n")
			return
		}
		got := chooseKernels()
		fmt.Printf("core %q level %d kernels %q\n", Core(), cpuLevel(), got)
		r := rand.New(rand.NewPCG(3, 4))
		m, n, k := 300, 257, 190
		a, b, c := randFloats(r, m*k), randFloats(r, k*n), make([]float32, m*n)
		Sgemm(false, true, m, n, k, a, k, b, k, 0, c, n)
		for i := range m {
			for j := range n {
				var want float64
				for l := range k {
					want += float64(a[i*k+l]) * float64(b[j*k+l])
				}
				if d := math.Abs(float64(c[i*n+j]) - want); d > 1e-4*(1+math.Abs(want)) {
					fmt.Printf("wrong product: C[%d,%d] = %v, want %v\n", i, j, c[i*n+j], want)
					return
				}
			}
		}
		fmt.Printf("products right\n")
		return
	default:
		return
	}
	if Core() == "" {
		t.Skip("BLAS is Accelerate here: it chooses its own kernels")
	}
	// helper runs this test again in a fresh process, in mode, with OPENBLAS_CORETYPE
	// as coretype ("" for none).
	helper := func(mode, coretype string) string {
		t.Helper()
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "OPENBLAS_CORETYPE=") {
				env = append(env, kv)
			}
		}
		if coretype != "" {
			env = append(env, "OPENBLAS_CORETYPE="+coretype)
		}
		cmd := exec.Command(os.Args[0], "-test.run", "^TestKernelsFitProcessor$")
		cmd.Env = append(env, "INLOOP_BLAS_CORE_HELPER="+mode)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper %s: %v\n%s", mode, err, out)
		}
		return string(out)
	}
	parse := func(out string) (core string, level int, chosen string) {
		t.Helper()
		i := strings.Index(out, "core ")
		if i < 0 {
			t.Fatalf("helper printed no core:\n%s", out)
		}
		if _, err := fmt.Sscanf(out[i:], "core %q level %d kernels %q", &core, &level, &chosen); err != nil {
			t.Fatalf("%v in %q", err, out)
		}
		return core, level, chosen
	}
	core, level, chosen := parse(helper("plain", ""))
	t.Logf("this processor: level %d, OpenBLAS runs %s kernels %s", level, core, chosen)
	if level >= 2 && preAVX[strings.ToLower(core)] {
		t.Errorf("a processor with AVX2 and FMA runs OpenBLAS's %s kernels (no AVX)", core)
	}

	core, _, chosen = parse(helper("plain", "Prescott"))
	if core != "Prescott" || chosen != "" {
		t.Errorf("with OPENBLAS_CORETYPE=Prescott the kernels are %s (%q), want the user's Prescott", core, chosen)
	}

	out := helper("fallback", "")
	if strings.Contains(out, "no run-time choice") {
		t.Skip("this OpenBLAS is built for one processor: nothing to choose")
	}
	core, level, chosen = parse(out)
	if want, ok := coreFor[level]; ok {
		if !strings.EqualFold(core, want) || chosen == "" {
			t.Errorf("after OpenBLAS's fallback on a level-%d processor the kernels are %s (%q), want %s", level, core, chosen, want)
		}
	} else if core != "Prescott" || chosen != "" {
		t.Errorf("a level-%d processor (no AVX2) got %s kernels (%q), want OpenBLAS's own choice kept", level, core, chosen)
	}
	if !strings.Contains(out, "products right") {
		t.Errorf("after choosing the kernels again:\n%s", out)
	}
}
