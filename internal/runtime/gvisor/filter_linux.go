package gvisor

import (
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/seccomp"
)

// The policy's seccomp program travels into a sandbox in the kernel's own
// layout, struct sock_filter (8 bytes: code, jt, jf, k in the host's byte
// order): the init reads it without a decoder, and a one-shot sandbox's
// init gets it in its environment (base64) instead of a file.

// encodeFilter is prog in struct sock_filter layout.
func encodeFilter(prog []runtime.SockFilter) []byte { return runtime.Program(prog).Pack() }

// decodeFilter reverses encodeFilter.
func decodeFilter(b []byte) ([]seccomp.SockFilter, error) {
	p, err := runtime.UnpackProgram(b)
	if err != nil {
		return nil, err
	}
	return p.Filter(), nil
}
