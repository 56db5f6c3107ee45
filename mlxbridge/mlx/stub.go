//go:build !cgo || !(darwin || linux)

package mlx

import (
	"fmt"

	mx "github.com/inloop/inloop/mlxbridge"
)

func init() {
	mx.Register("mlx", 10, func() (mx.Backend, error) {
		return nil, fmt.Errorf("%w: mlx: this build has no cgo support for loading libmlxc", mx.ErrUnavailable)
	})
}
