//go:build unix

package atomicfile

import "syscall"

func syscallUmask(m int) int { return syscall.Umask(m) }
