package gvisor

import (
	"encoding/binary"
	"fmt"

	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/seccomp"
)

// The policy's seccomp program travels into a sandbox in the kernel's own
// layout, struct sock_filter (8 bytes: code, jt, jf, k in the host's byte
// order): the init reads it without a decoder, and a one-shot sandbox's
// init gets it in its environment (base64) instead of a file.

// encodeFilter is prog in struct sock_filter layout.
func encodeFilter(prog []runtime.SockFilter) []byte {
	b := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		b = binary.NativeEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b
}

// decodeFilter reverses encodeFilter.
func decodeFilter(b []byte) ([]seccomp.SockFilter, error) {
	if len(b) == 0 || len(b)%8 != 0 {
		return nil, fmt.Errorf("seccomp program of %d bytes: not a whole number of 8-byte instructions", len(b))
	}
	prog := make([]seccomp.SockFilter, len(b)/8)
	for i := range prog {
		in := b[8*i:]
		prog[i] = seccomp.SockFilter{Code: binary.NativeEndian.Uint16(in), Jt: in[2], Jf: in[3], K: binary.NativeEndian.Uint32(in[4:])}
	}
	return prog, nil
}
