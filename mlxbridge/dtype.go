package mlxbridge

import "fmt"

// DType is an array's element type. Floating arrays compute in float32; Float16 and
// BFloat16 are storage types whose values are rounded to that precision.
type DType uint8

const (
	Float32 DType = iota
	Float16
	BFloat16
	Int32
	Uint32
	Uint8
	Bool
)

var dtypeNames = [...]string{"float32", "float16", "bfloat16", "int32", "uint32", "uint8", "bool"}

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// IsFloat reports whether arithmetic and gradients are defined for d.
func (d DType) IsFloat() bool { return d == Float32 || d == Float16 || d == BFloat16 }

// Size is the number of bytes an element takes in storage.
func (d DType) Size() int {
	switch d {
	case Float16, BFloat16:
		return 2
	case Uint8, Bool:
		return 1
	}
	return 4
}

// promote gives the dtype of a binary op's result.
func promote(a, b DType) DType {
	if a == b {
		return a
	}
	return Float32
}
