//go:build !linux

package gateway

import (
	"net"
	"sync/atomic"
)

// splicePump: splice(2) is Linux's; elsewhere pump copies.
func (t *tunnel) splicePump(dst, src net.Conn, n *atomic.Int64) (bool, error) { return false, nil }

// peerOpen: without a peek, a kept connection is taken as open (a request
// the server's close fails is sent again once, when it may be).
func peerOpen(c net.Conn) bool { return true }

// splice: elsewhere response bodies are copied.
func (b *respBody) splice(n int64) (int64, bool, error) { return 0, false, nil }
