//go:build !linux

package gateway

import (
	"net"
	"sync/atomic"
)

// splicePump: splice(2) is Linux's; elsewhere pump copies.
func (t *tunnel) splicePump(dst, src net.Conn, n *atomic.Int64) (bool, error) { return false, nil }
