//go:build !unix

package atomicfile

func syscallUmask(m int) int { return 0 }
