package native

import (
	"context"
	"io"
	"os"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// AgentClient is the supervisor's side of the agent protocol on its own,
// for a backend whose sandbox runs airlock's agent but is not built by
// this package (the gvisor runtime reaches its agent over a host unix
// socket of runsc's). It is the same client the native sandboxes use:
// exec (captured output with holds, stdin, signals), file operations and
// adoption; the backend keeps the sandbox's life cycle (kill, destroy,
// pause) to itself.
type AgentClient struct{ sb *sandbox }

// NewAgentClient serves a freshly started agent on conn (a connected
// SOCK_SEQPACKET socket, non-blocking).
func NewAgentClient(id string, conn *os.File) *AgentClient {
	sb := &sandbox{id: id, procs: map[uint64]*process{}, done: make(chan struct{}), agentVersion: agent.Version,
		initPidFD: -1, conn: agent.NewConn(conn)}
	go sb.readLoop()
	return &AgentClient{sb}
}

// AdoptAgent connects to the agent of a sandbox another supervisor
// started: the agent reports its running processes and those that ended
// while nobody was connected (see Runtime.Adopt).
func AdoptAgent(ctx context.Context, id string, conn *os.File) (*AgentClient, *agent.State, error) {
	sb := &sandbox{id: id, procs: map[uint64]*process{}, done: make(chan struct{}), initPidFD: -1,
		conn: agent.NewConn(conn), nextSeq: randomSeq()}
	state, err := sb.hello(ctx)
	if err != nil {
		sb.conn.Close()
		return nil, nil, err
	}
	sb.takeState(state)
	go sb.readLoop()
	return &AgentClient{sb}, state, nil
}

// Exec starts a process through the agent. A TTY process needs the agent
// to hand its terminal over the channel.
func (c *AgentClient) Exec(ctx context.Context, req *runtime.ExecRequest) (runtime.Process, error) {
	return c.sb.Exec(ctx, req)
}

// Process returns a process by its request id (see Adopt).
func (c *AgentClient) Process(id uint64) (runtime.Process, bool) { return c.sb.Process(id) }

// Done is closed when the channel to the agent is gone.
func (c *AgentClient) Done() <-chan struct{} { return c.sb.done }

// Close closes the channel; a detached agent waits for the next one.
func (c *AgentClient) Close() error { return c.sb.conn.Close() }

// The file operations of runtime.Files and runtime.FileMaker.

func (c *AgentClient) Stat(ctx context.Context, path string) (runtime.FileInfo, error) {
	return c.sb.Stat(ctx, path)
}

func (c *AgentClient) ReadDir(ctx context.Context, path string) ([]runtime.FileInfo, error) {
	return c.sb.ReadDir(ctx, path)
}

func (c *AgentClient) MkdirAll(ctx context.Context, path string, mode os.FileMode) error {
	return c.sb.MkdirAll(ctx, path, mode)
}

func (c *AgentClient) MakeDir(ctx context.Context, path string, mode os.FileMode, excl bool) (runtime.FileInfo, error) {
	return c.sb.MakeDir(ctx, path, mode, excl)
}

func (c *AgentClient) Move(ctx context.Context, from, to string) (runtime.FileInfo, error) {
	return c.sb.Move(ctx, from, to)
}

func (c *AgentClient) Remove(ctx context.Context, path string, recursive bool) error {
	return c.sb.Remove(ctx, path, recursive)
}

func (c *AgentClient) Rename(ctx context.Context, from, to string) error {
	return c.sb.Rename(ctx, from, to)
}

func (c *AgentClient) ReadFile(ctx context.Context, path string) (io.ReadCloser, runtime.FileInfo, error) {
	return c.sb.ReadFile(ctx, path)
}

func (c *AgentClient) WriteFile(ctx context.Context, path string, mode os.FileMode, r io.Reader) error {
	return c.sb.WriteFile(ctx, path, mode, r)
}

func (c *AgentClient) Download(ctx context.Context, path string, opts runtime.DownloadOptions) (io.ReadCloser, error) {
	return c.sb.Download(ctx, path, opts)
}

func (c *AgentClient) Upload(ctx context.Context, dir string, r io.Reader) error {
	return c.sb.Upload(ctx, dir, r)
}
