package cpu_test

import (
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/bridgetest"
	"github.com/inloop/inloop/mlxbridge/cpu"
)

func TestConformance(t *testing.T) { bridgetest.Run(t, cpu.New()) }

// plain hides the cpu backend's fused kernels, so the suite also checks the ops
// mlxbridge composes for backends that lack them.
type plain struct{ mx.Backend }

func TestConformanceComposed(t *testing.T) { bridgetest.Run(t, plain{cpu.New()}) }
