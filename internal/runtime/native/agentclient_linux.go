package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

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

// SkipProcessIDs makes the next process's id larger than upTo.
func (c *AgentClient) SkipProcessIDs(upTo uint64) { c.sb.SkipProcessIDs(upTo) }

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

// Warm runs req (captured, as the service runs every command) to its end
// without a trace for the supervisor: no process of this client keeps it,
// its output is read and released, and the next process still gets the
// first id. It pre-pays what a sandbox's first command costs once (the
// agent's threads and code paths, the sandbox kernel's caches of the
// binary and its libraries) for a sandbox that waits in a warm pool. It
// is refused once this client has started anything else.
func (c *AgentClient) Warm(ctx context.Context, req *runtime.ExecRequest) error {
	return c.sb.warm(ctx, req)
}

// WarmRequest is the command a warm pool's new member runs once before it
// is handed out: a dynamically linked program found on every system root,
// so that the first execution of a binary, its dynamic loader and libc
// (the sandbox's dentries and file mappings; in gVisor, its kernel's) and
// the agent's first captured exec (its threads, code pages and buffers)
// are paid by the pool, not by the caller's first command.
func WarmRequest() *runtime.ExecRequest {
	return &runtime.ExecRequest{Argv: []string{"true"}, Dir: "/workspace",
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
}

var _ runtime.Warmer = (*sandbox)(nil)

// Warm implements runtime.Warmer for a daemon's pool member (see
// AgentClient.Warm): one hidden captured exec of WarmRequest. A sandbox
// with an activity record is not warmed: its record would show the
// command.
func (sb *sandbox) Warm(ctx context.Context) error {
	if sb.recordExec {
		return nil
	}
	return sb.warm(ctx, WarmRequest())
}

func (sb *sandbox) warm(ctx context.Context, req *runtime.ExecRequest) error {
	sb.mu.Lock()
	fresh := sb.nextID == sb.idBase
	sb.mu.Unlock()
	if !fresh {
		return errors.New("warm: the sandbox has run commands already")
	}
	r := *req
	r.Capture, r.Hold, r.TTY = true, true, false
	// The id it took is handed out again once its process is gone (or
	// never started); one still running (the warm-up timed out) is killed
	// and keeps its id.
	ended := true
	defer func() {
		sb.mu.Lock()
		if ended && sb.nextID == sb.idBase+1 {
			delete(sb.procs, sb.nextID)
			sb.nextID = sb.idBase
		}
		sb.mu.Unlock()
	}()
	p, err := sb.Exec(ctx, &r)
	if err != nil {
		return err
	}
	proc := p.(*process)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func(stream int) {
			defer wg.Done()
			a := proc.AttachOutput(stream)
			defer a.Close(false)
			var cursor uint64
			for n := 0; n < 64; n++ {
				ch, err := a.Read(ctx, cursor, 64<<10, 5*time.Second)
				if err != nil {
					errs[stream-1] = err
					return
				}
				cursor = ch.Next()
				if ch.EOF {
					return
				}
			}
		}(i + 1)
	}
	st, err := proc.Wait(ctx)
	if err != nil {
		ended = false
		proc.Signal(unix.SIGKILL)
	}
	wg.Wait()
	sb.conn.Send(&agent.Message{Type: agent.TypeRelease, Release: &agent.Release{ID: proc.id}})
	if err == nil {
		err = errors.Join(errs...)
	}
	if err == nil && (st.Code != 0 || st.Signal != 0) {
		err = fmt.Errorf("warm: %s exited with status %d", req.Argv[0], st.ShellCode())
	}
	return err
}
