//go:build !linux

package seccomp

// SockFilter is one classic BPF instruction (struct sock_filter). On Linux
// it is an alias of golang.org/x/sys/unix.SockFilter; elsewhere, where
// x/sys/unix has no such type, it has the same layout so that profiles can
// still be compiled and inspected.
type SockFilter struct {
	Code uint16
	Jt   uint8
	Jf   uint8
	K    uint32
}
