package seccomp

import "golang.org/x/sys/unix"

// SockFilter is one classic BPF instruction; on Linux it is
// golang.org/x/sys/unix.SockFilter, so programs can be passed to Install
// and to unix APIs without conversion.
type SockFilter = unix.SockFilter
