package gvisor

// Service sandboxes (Runtime.Agent): what airlock serve needs from the
// gvisor backend. The container's PID 1 is airlock's agent, the same
// server native sandboxes run (internal/agent), and the supervisor talks to
// it with the native runtime's own client (native.AgentClient) over a host
// unix socket that the agent binds inside the sandbox (see
// agent_guest_linux.go for why it is made that way). Everything the daemon
// does through the agent then works the same on both backends: captured
// output with cursors and holds, stdin, signals, files, tar, and adoption
// after a restart (the socket stays bound in the state directory; a new
// supervisor connects and says hello). What the agent cannot do here:
// hand a terminal to the supervisor (runsc cannot pass a descriptor from
// the sandbox to the host), so a TTY process is started with runsc exec
// and a host pty instead, as in airlock run.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// ErrNotAdoptable is returned by Adopt for a sandbox that does not exist,
// is not a service sandbox, or no longer runs.
var ErrNotAdoptable = errors.New("sandbox cannot be adopted")

// serviceFile records, in a service sandbox's state directory, what a
// later supervisor needs to adopt or remove it.
type serviceFile struct {
	Global []string `json:"global"` // runsc's global flags for this sandbox
	Listen []string `json:"listen,omitempty"`
}

const serviceFileName = "service.json"

// agentBundle turns a bundle into a service sandbox's: the init runs in
// agent mode, with the state directory's agent/ bound at guestAgent, and
// CAP_SYS_ADMIN and CAP_SETPCAP (only to cover that directory and empty its bounding set; it drops both at once).
func (sb *sandbox) agentBundle(b *bundle, rootfs string, hostRoot bool) error {
	dir := filepath.Join(sb.dir, "agent")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if hostRoot {
		if err := os.MkdirAll(filepath.Join(rootfs, guestAgent), 0o755); err != nil {
			return err
		}
	}
	b.spec.Mounts = append(b.spec.Mounts, specs.Mount{Destination: guestAgent, Type: "bind", Source: dir,
		Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}})
	args := b.spec.Process.Args
	args = append([]string{args[0], args[1], agentModeArg}, args[3:]...)
	if sb.seccomp {
		args = append(args, "--seccomp")
	}
	b.spec.Process.Args = args
	caps := []string{"CAP_SYS_ADMIN", "CAP_SETPCAP"}
	b.spec.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	// The agent binds its socket on the host (create); with egress the
	// init also connects to the gateway's sockets (open).
	if i := slices.Index(sb.global, "--host-uds=open"); i >= 0 {
		sb.global[i] = "--host-uds=all"
	} else {
		sb.global = append(sb.global, "--host-uds=create")
	}
	return nil
}

// dialAgent connects to the agent's socket in dir (through /proc/self/fd,
// so that the length of the state directory's path does not matter, and
// refusing anything but a socket there), retrying until ctx ends while the
// socket does not exist yet or does not accept yet; alive reports whether
// the sandbox still runs, checked now and then.
func dialAgent(ctx context.Context, dir string, alive func() bool) (*os.File, error) {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent directory: %w", err)
	}
	defer unix.Close(dfd)
	addr := &unix.SockaddrUnix{Name: fmt.Sprintf("/proc/self/fd/%d/%s", dfd, agentSocket)}
	last := time.Now()
	for delay := 200 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
		var st unix.Stat_t
		err := unix.Fstatat(dfd, agentSocket, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return nil, fmt.Errorf("agent socket: %s is not a socket", filepath.Join(dir, agentSocket))
		}
		if err == nil {
			fd, serr := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
			if serr != nil {
				return nil, serr
			}
			if err = unix.Connect(fd, addr); err == nil {
				if err := unix.SetNonblock(fd, true); err != nil {
					unix.Close(fd)
					return nil, err
				}
				return os.NewFile(uintptr(fd), "control"), nil
			}
			unix.Close(fd)
		}
		if err != unix.ENOENT && err != unix.ECONNREFUSED && err != unix.EAGAIN {
			return nil, fmt.Errorf("connect to the agent: %w", err)
		}
		if time.Since(last) > 500*time.Millisecond {
			last = time.Now()
			if alive != nil && !alive() {
				return nil, errors.New("the sandbox ended before its agent listened")
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to the agent: %w", ctx.Err())
		case <-time.After(delay):
		}
	}
}

// startAgent connects to a freshly started service sandbox's agent and
// records what a later supervisor needs.
func (sb *sandbox) startAgent(ctx context.Context) (runtime.Sandbox, error) {
	raw, _ := json.Marshal(serviceFile{Global: sb.global, Listen: sb.listen})
	if err := os.WriteFile(filepath.Join(sb.dir, serviceFileName), raw, 0o600); err != nil {
		return nil, err
	}
	t0 := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := dialAgent(cctx, filepath.Join(sb.dir, "agent"), sb.running)
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w: %s", err, sb.log())
	}
	sb.info.Steps["agent.connect"] = time.Since(t0)
	return &agentSandbox{sandbox: sb, AgentClient: native.NewAgentClient(sb.id, conn)}, nil
}

// agentSandbox is a service sandbox: the runtime's life cycle (runsc) with
// the agent's processes and files.
type agentSandbox struct {
	*sandbox
	*native.AgentClient // the agent; its file operations serve runtime.Files and runtime.FileMaker as they are
}

var (
	_ runtime.Sandbox   = (*agentSandbox)(nil)
	_ runtime.Files     = (*agentSandbox)(nil)
	_ runtime.FileMaker = (*agentSandbox)(nil)
	_ runtime.Pauser    = (*agentSandbox)(nil)
	_ runtime.Watcher   = (*agentSandbox)(nil)
	_ runtime.Listeners = (*agentSandbox)(nil)
)

// Exec implements runtime.Sandbox: through the agent, or with runsc exec
// for a TTY (the agent cannot hand its terminal out of gVisor).
func (s *agentSandbox) Exec(ctx context.Context, req *runtime.ExecRequest) (runtime.Process, error) {
	if req.TTY {
		return s.sandbox.Exec(ctx, req)
	}
	return s.AgentClient.Exec(ctx, req)
}

var _ runtime.Warmer = (*agentSandbox)(nil)

// Warm implements runtime.Warmer: one hidden captured exec of
// native.WarmRequest through the agent (see native.AgentClient.Warm; in
// gVisor it also pays the Sentry's first execve of a binary and the
// systrap address-space pool). A root without the command is not an
// error worth failing the pool for: the caller counts it as skipped.
func (s *agentSandbox) Warm(ctx context.Context) error {
	return s.AgentClient.Warm(ctx, native.WarmRequest())
}

// Done implements runtime.Watcher: the channel to the agent is gone (the
// sandbox ended, or was destroyed).
func (s *agentSandbox) Done() <-chan struct{} { return s.AgentClient.Done() }

// Process returns a process the agent reported after Adopt.
func (s *agentSandbox) Process(id uint64) (runtime.Process, bool) { return s.AgentClient.Process(id) }

// Destroy implements runtime.Sandbox.
func (s *agentSandbox) Destroy(ctx context.Context) error {
	s.AgentClient.Close()
	return s.sandbox.Destroy(ctx)
}

var _ runtime.PortDialer = (*agentSandbox)(nil)

// DialPort implements runtime.PortDialer: the sandbox's loopback is
// gVisor's own network stack, which the host cannot enter (and runsc's
// port-forward refuses --network=none), so the agent relays: the
// supervisor connects to the agent's ports socket (beside its control
// socket, equally out of the sandbox's sight), names the port, and the
// agent connects to 127.0.0.1:PORT inside and copies both ways.
func (s *agentSandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1 to 65535: %w", port, runtime.ErrInvalid)
	}
	dir := filepath.Join(s.dir, "agent")
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent directory: %w", err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, portsSocket, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, errors.New("this sandbox's agent relays no ports (made by an older airlock)")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", dfd, portsSocket))
	if err != nil {
		return nil, fmt.Errorf("connect to the agent's ports socket: %w", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	c.SetDeadline(deadline)
	if _, err := fmt.Fprintf(c, "%d\n", port); err != nil {
		c.Close()
		return nil, err
	}
	// One byte at a time: nothing after the status line may be consumed.
	var line []byte
	b := make([]byte, 1)
	for len(line) < 512 {
		if _, err := c.Read(b); err != nil {
			c.Close()
			return nil, fmt.Errorf("port %d: the agent did not answer: %w", port, err)
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	c.SetDeadline(time.Time{})
	if msg, ok := strings.CutPrefix(string(line), "error "); ok {
		c.Close()
		if strings.Contains(msg, "connection refused") {
			return nil, fmt.Errorf("port %d: %s: %w", port, msg, unix.ECONNREFUSED)
		}
		return nil, fmt.Errorf("port %d: %s", port, msg)
	}
	if string(line) != "ok" {
		c.Close()
		return nil, fmt.Errorf("port %d: the agent answered %q", port, line)
	}
	return c, nil
}

// readService reads a sandbox's service.json.
func (r *Runtime) readService(id string) (*serviceFile, error) {
	raw, err := os.ReadFile(filepath.Join(r.stateRoot(), id, serviceFileName))
	if err != nil {
		return nil, err
	}
	var sf serviceFile
	if err := json.Unmarshal(raw, &sf); err != nil {
		return nil, fmt.Errorf("bad %s: %w", serviceFileName, err)
	}
	return &sf, nil
}

func (r *Runtime) runsc() (string, error) {
	if r.Runsc != "" {
		return r.Runsc, nil
	}
	return Find()
}

// Adopt reconnects to a service sandbox a previous supervisor (this daemon
// before a restart) created: runsc kept it running, and its agent waits on
// its socket. A paused sandbox is resumed (the caller pauses it again if
// it should stay paused). The egress sockets are listened on again.
func (r *Runtime) Adopt(ctx context.Context, id string) (_ runtime.Sandbox, _ *agent.State, retErr error) {
	if !native.IsID(id) {
		return nil, nil, fmt.Errorf("sandbox %q: %w", id, ErrNotAdoptable)
	}
	sf, err := r.readService(id)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %q: %w (%v)", id, ErrNotAdoptable, err)
	}
	runsc, err := r.runsc()
	if err != nil {
		return nil, nil, err
	}
	sb := &sandbox{id: id, dir: filepath.Join(r.stateRoot(), id), runsc: runsc, rt: r, done: make(chan struct{}), created: true,
		global: sf.Global, listen: sf.Listen, seccomp: true,
		info: runtime.Info{ID: id, Runtime: Name, Rootless: os.Geteuid() != 0, Steps: map[string]time.Duration{}}}
	if st := sb.status(); st == "paused" {
		if err := sb.Resume(ctx); err != nil {
			return nil, nil, fmt.Errorf("sandbox %q: adopt: resume: %w", id, err)
		}
	} else if st != "running" || !sb.running() {
		return nil, nil, fmt.Errorf("sandbox %q: it no longer runs: %w", id, ErrNotAdoptable)
	}
	defer func() {
		if retErr != nil {
			for _, l := range sb.listeners {
				l.Close()
			}
		}
	}()
	for i := range sf.Listen {
		p := filepath.Join(sb.dir, "egress", fmt.Sprintf("%d.sock", i))
		os.Remove(p)
		l, err := net.Listen("unix", p)
		if err != nil {
			return nil, nil, fmt.Errorf("sandbox %q: adopt: egress socket: %w", id, err)
		}
		sb.listeners = append(sb.listeners, l)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := dialAgent(cctx, filepath.Join(sb.dir, "agent"), sb.running)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %q: adopt: %w", id, err)
	}
	client, state, err := native.AdoptAgent(cctx, id, conn)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %q: adopt: %w", id, err)
	}
	cg, paths, err := openCgroup(sb.dir)
	if err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("sandbox %q: adopt: %s: %w", id, cgroupLayer, err)
	}
	sb.cg, sb.info.CgroupPaths = cg, paths
	if raw, err := os.ReadFile(filepath.Join(sb.dir, "config.json")); err == nil {
		var s specs.Spec
		if json.Unmarshal(raw, &s) == nil && s.Linux != nil && s.Linux.CgroupsPath != "" && paths == nil {
			// Made by an airlock that let runsc make the cgroup.
			sb.info.CgroupPaths = cgroupDirs(s.Linux.CgroupsPath)
		}
		if s.Process != nil {
			sb.rlimits = s.Process.Rlimits
			sb.seccomp = slices.Contains(s.Process.Args, "--seccomp")
		}
	}
	return &agentSandbox{sandbox: sb, AgentClient: client}, state, nil
}

// status is runsc's state of the sandbox ("running", "paused", ...), or "".
func (sb *sandbox) status() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := sb.runscCmd(ctx, "state", sb.id).Output()
	if err != nil {
		return ""
	}
	var st struct {
		Status string `json:"status"`
	}
	json.Unmarshal(out, &st)
	return st.Status
}

// Remove destroys the service sandbox id that this process does not hold
// (runsc's container, its cgroup and the state directory). A sandbox with
// no state is not an error.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	if !native.IsID(id) {
		return fmt.Errorf("sandbox %q: %w", id, runtime.ErrInvalid)
	}
	dir := filepath.Join(r.stateRoot(), id)
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	runsc, err := r.runsc()
	if err != nil {
		return err
	}
	global := r.runscArgs(0)
	if sf, err := r.readService(id); err == nil {
		global = sf.Global
	}
	sb := &sandbox{id: id, dir: dir, runsc: runsc, rt: r, done: make(chan struct{}), created: true, global: global}
	if sb.cg, _, err = openCgroup(dir); err != nil {
		return fmt.Errorf("sandbox %q: %s: %w", id, cgroupLayer, err)
	}
	return sb.Destroy(ctx)
}

// List returns the ids of the service sandboxes that have state here.
func (r *Runtime) List() ([]string, error) {
	ents, err := os.ReadDir(r.stateRoot())
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if !e.IsDir() || !native.IsID(e.Name()) {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(r.stateRoot(), e.Name(), "owner.json"))
		var o owner
		if err == nil && json.Unmarshal(raw, &o) == nil && !o.Detached {
			continue // an airlock run sandbox: its own sweep
		}
		ids = append(ids, e.Name())
	}
	return ids, nil
}

// Available reports, in one line naming the install command, why no
// sandbox can be made now (runsc missing), or nil.
func (r *Runtime) Available() error {
	_, err := r.runsc()
	return err
}

// Release drops what runsc shares between the sandboxes of this state
// root when none is left: the mount that pins its empty ("null") network
// namespace, which runsc makes once per root and would otherwise outlive
// every sandbox. For a daemon that shuts down; sandboxes that still run
// keep their own namespaces.
func (r *Runtime) Release() {
	if ids, err := r.List(); err != nil || len(ids) > 0 {
		return
	}
	p := filepath.Join(r.stateRoot(), "runsc", "null-netns")
	// Concurrent creations may have stacked mounts there.
	for i := 0; i < 64 && unix.Unmount(p, unix.MNT_DETACH) == nil; i++ {
	}
	os.Remove(p)
}
