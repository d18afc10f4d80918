package runtime

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// Program is a seccomp program on its way into a sandbox. It travels in
// the kernel's own layout, struct sock_filter (8 bytes an instruction:
// code, jt, jf, k in the host's byte order), and in JSON as that layout
// in base64: the default policy's ~350 instructions as JSON objects were
// 11 KB whose decoding was most of the time the sandbox's init took to
// read its setup (about 0.15-0.3 ms, against 0.04 ms packed).
type Program []SockFilter

// Pack is p in struct sock_filter layout.
func (p Program) Pack() []byte {
	b := make([]byte, 0, 8*len(p))
	for _, in := range p {
		b = binary.NativeEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b
}

// UnpackProgram reverses Pack. An empty program is an error: no filter
// is never a valid one.
func UnpackProgram(b []byte) (Program, error) {
	if len(b) == 0 || len(b)%8 != 0 {
		return nil, fmt.Errorf("seccomp program of %d bytes: not a whole number of 8-byte instructions", len(b))
	}
	p := make(Program, len(b)/8)
	for i := range p {
		in := b[8*i:]
		p[i] = SockFilter{Code: binary.NativeEndian.Uint16(in), Jt: in[2], Jf: in[3], K: binary.NativeEndian.Uint32(in[4:])}
	}
	return p, nil
}

// MarshalJSON encodes p packed, in base64.
func (p Program) MarshalJSON() ([]byte, error) {
	if p == nil {
		return []byte("null"), nil
	}
	return json.Marshal(p.Pack())
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (p *Program) UnmarshalJSON(data []byte) error {
	var b []byte
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("seccomp program: %w", err)
	}
	if b == nil {
		*p = nil
		return nil
	}
	q, err := UnpackProgram(b)
	if err != nil {
		return err
	}
	*p = q
	return nil
}
