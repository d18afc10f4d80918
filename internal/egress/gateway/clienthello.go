package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// maxHello bounds the bytes read while waiting for a complete ClientHello.
const maxHello = 16 << 10

// helloState is what parseClientHello made of the bytes so far.
type helloState int

const (
	helloNeedMore helloState = iota
	helloDone                // a complete ClientHello was parsed
	helloNotTLS              // the stream does not start with a TLS handshake record
)

// helloInfo is what the gateway learns from a ClientHello.
type helloInfo struct {
	sni    string // server_name (host_name), as sent
	hasSNI bool
}

// parseClientHello parses the TLS records at the start of a client's
// stream, across as many records as the ClientHello was fragmented into.
// A first byte of 0x16 commits to TLS: anything malformed after it is an
// error, never "not TLS".
func parseClientHello(data []byte) (helloState, helloInfo, error) {
	if len(data) == 0 {
		return helloNeedMore, helloInfo{}, nil
	}
	if data[0] != 0x16 {
		return helloNotTLS, helloInfo{}, nil
	}
	var hs []byte
	for off := 0; ; {
		if len(data)-off < 5 {
			return helloNeedMore, helloInfo{}, nil
		}
		rec := data[off:]
		if rec[0] != 0x16 {
			return 0, helloInfo{}, fmt.Errorf("TLS record type %d before the ClientHello was complete", rec[0])
		}
		if rec[1] != 3 {
			return 0, helloInfo{}, fmt.Errorf("TLS record version %d.%d", rec[1], rec[2])
		}
		n := int(rec[3])<<8 | int(rec[4])
		if n == 0 || n > 1<<14 {
			return 0, helloInfo{}, fmt.Errorf("TLS record length %d", n)
		}
		if len(rec)-5 < n {
			return helloNeedMore, helloInfo{}, nil
		}
		hs = append(hs, rec[5:5+n]...)
		off += 5 + n
		if len(hs) < 4 {
			continue
		}
		if hs[0] != 1 {
			return 0, helloInfo{}, fmt.Errorf("first TLS handshake message is type %d, not a ClientHello", hs[0])
		}
		m := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if m > maxHello {
			return 0, helloInfo{}, fmt.Errorf("ClientHello of %d bytes is larger than %d", m, maxHello)
		}
		if len(hs) < 4+m {
			continue
		}
		info, err := parseHelloBody(hs[4 : 4+m])
		if err != nil {
			return 0, helloInfo{}, err
		}
		return helloDone, info, nil
	}
}

// reader is a bounds-checked cursor over a handshake message.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) bytes(n int) []byte {
	if r.bad || n < 0 || len(r.b) < n {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() int {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

func (r *reader) u16() int {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return int(b[0])<<8 | int(b[1])
}

// vec reads a vector with an n-byte length prefix.
func (r *reader) vec(n int) *reader {
	var l int
	if n == 1 {
		l = r.u8()
	} else {
		l = r.u16()
	}
	return &reader{b: r.bytes(l), bad: r.bad}
}

const (
	extServerName = 0
	nameTypeHost  = 0
)

var errHello = errors.New("malformed ClientHello")

// parseHelloBody finds the server_name in a ClientHello body. Duplicate
// extensions and several host names are errors: a server might read a
// different one than the gateway did.
func parseHelloBody(body []byte) (helloInfo, error) {
	r := &reader{b: body}
	r.bytes(2 + 32) // legacy_version, random
	if sid := r.vec(1); len(sid.b) > 32 {
		return helloInfo{}, errHello
	}
	if cs := r.vec(2); len(cs.b) < 2 || len(cs.b)%2 != 0 {
		return helloInfo{}, errHello
	}
	if comp := r.vec(1); len(comp.b) < 1 {
		return helloInfo{}, errHello
	}
	if r.bad {
		return helloInfo{}, errHello
	}
	var info helloInfo
	if len(r.b) == 0 {
		return info, nil // no extensions at all
	}
	exts := r.vec(2)
	if r.bad || len(r.b) != 0 {
		return helloInfo{}, errHello
	}
	seen := make(map[int]bool)
	for len(exts.b) > 0 {
		typ := exts.u16()
		data := exts.vec(2)
		if exts.bad || data.bad {
			return helloInfo{}, errHello
		}
		if seen[typ] {
			return helloInfo{}, fmt.Errorf("%w: duplicate extension %d", errHello, typ)
		}
		seen[typ] = true
		if typ != extServerName {
			continue
		}
		list := data.vec(2)
		if data.bad || len(data.b) != 0 || len(list.b) == 0 {
			return helloInfo{}, fmt.Errorf("%w: bad server_name extension", errHello)
		}
		for len(list.b) > 0 {
			nt := list.u8()
			name := list.vec(2)
			if list.bad || name.bad {
				return helloInfo{}, fmt.Errorf("%w: bad server_name extension", errHello)
			}
			if nt != nameTypeHost {
				continue
			}
			if info.hasSNI {
				return helloInfo{}, fmt.Errorf("%w: several host names in server_name", errHello)
			}
			info.sni, info.hasSNI = string(name.b), true
		}
	}
	return info, nil
}

// errNoBytes: the client sent nothing within the first-byte wait.
var errNoBytes = errors.New("client sent nothing")

// sniff reads the client's first bytes from r (reading c), until it has a
// complete ClientHello or knows the stream is not TLS. It waits firstWait
// for the first byte (0: no limit), then rest for the whole ClientHello.
// It returns every byte read, to be forwarded if the connection goes on.
func sniff(r io.Reader, c net.Conn, firstWait, rest time.Duration) ([]byte, helloState, helloInfo, error) {
	defer c.SetReadDeadline(time.Time{})
	if firstWait > 0 {
		c.SetReadDeadline(time.Now().Add(firstWait))
	} else {
		c.SetReadDeadline(time.Time{})
	}
	buf := make([]byte, 0, 2048)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, min(cap(buf), maxHello+5-len(buf)))...)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		first := len(buf) == 0 && n > 0
		buf = buf[:len(buf)+n]
		if first {
			c.SetReadDeadline(time.Now().Add(rest))
		}
		if n > 0 {
			st, info, perr := parseClientHello(buf)
			if perr != nil {
				return buf, 0, helloInfo{}, perr
			}
			if st != helloNeedMore {
				return buf, st, info, nil
			}
			if len(buf) >= maxHello+5 {
				return buf, 0, helloInfo{}, fmt.Errorf("no complete ClientHello in the first %d bytes", len(buf))
			}
		}
		if err != nil {
			var ne net.Error
			if len(buf) == 0 && errors.As(err, &ne) && ne.Timeout() {
				return nil, 0, helloInfo{}, errNoBytes
			}
			if len(buf) > 0 && errors.Is(err, io.EOF) {
				return buf, 0, helloInfo{}, errors.New("client closed before its ClientHello was complete")
			}
			return buf, 0, helloInfo{}, err
		}
	}
}

// sniRule judges the client's first bytes for a tunnel to t: "" to let
// them through, else the rule that refuses the tunnel.
func sniRule(t target, st helloState, info helloInfo) string {
	if st == helloNotTLS {
		if t.port == 443 {
			return "not TLS: a tunnel to port 443 must start with a TLS ClientHello"
		}
		return ""
	}
	if t.ip.IsValid() {
		return "" // the address itself was checked; any server name will do
	}
	if !info.hasSNI {
		return fmt.Sprintf("sni mismatch: the ClientHello names no server, the tunnel is to %s", t.host)
	}
	sni := strings.TrimSuffix(info.sni, ".")
	if !strings.EqualFold(sni, t.host) {
		return fmt.Sprintf("sni mismatch: the ClientHello names %q, the tunnel is to %s", cleanRule(info.sni), t.host)
	}
	return ""
}
