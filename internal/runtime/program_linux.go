package runtime

import "golang.org/x/sys/unix"

// Filter is p as the kernel (and seccomp.Install) takes it.
func (p Program) Filter() []unix.SockFilter {
	f := make([]unix.SockFilter, len(p))
	for i, in := range p {
		f[i] = unix.SockFilter{Code: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return f
}
