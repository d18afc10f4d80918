package manager

import (
	"context"
	"fmt"
	"net"

	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// DialPort connects to a server listening on 127.0.0.1:port inside a
// running sandbox (a port preview). The connection is made from the host
// into the sandbox's network namespace: nothing in the sandbox's policy
// changes, and it gets no new way out.
func (m *Manager) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, invalid("port %d: want 1 to 65535", port)
	}
	_, rt, err := m.live(ctx, id)
	if err != nil {
		return nil, err
	}
	d, ok := rt.(runtime.PortDialer)
	if !ok {
		return nil, fmt.Errorf("ports: the %s runtime cannot reach a sandbox's ports: %w", runtimeOf(rt), errdefs.ErrNotSupported)
	}
	return d.DialPort(ctx, port)
}
