package gvisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/initbin"
	"github.com/airlock-dev/airlock/internal/progfile"
	"github.com/airlock-dev/airlock/internal/rundir"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/sysfile"
)

// Runtime is the gvisor runtime.
type Runtime struct {
	// Runsc is the runsc binary. Empty: Find.
	Runsc string
	// StateRoot holds one directory per sandbox (its OCI bundle) and
	// runsc's own state (runsc/). Empty: native.DefaultStateRoot()+"-gvisor".
	StateRoot string
	// Detached sandboxes outlive this process. Otherwise the container's
	// init ends (and runsc with it) when this process does.
	Detached bool
	// OneShot sandboxes run exactly one command, as the container's own
	// process: Create only writes the bundle, and the first Exec is one
	// `runsc run` (attached: runsc's sandbox dies with it, and it with this
	// process) instead of `run --detach` + `exec`. For `airlock run`.
	OneShot bool
	// Agent sandboxes (airlock serve's) run airlock's agent as their
	// init, reached over a host unix socket: captured output, stdin,
	// files and adoption after a restart (see service_linux.go). They
	// are detached.
	Agent bool
}

var _ runtime.Runtime = (*Runtime)(nil)

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return Name }

func (r *Runtime) stateRoot() string {
	if r.StateRoot != "" {
		return r.StateRoot
	}
	return native.DefaultStateRoot() + "-gvisor"
}

// runscArgs are the global flags of every runsc call: its state under
// ours, the systrap platform (no KVM needed), no network but loopback, the
// root filesystem's copy-on-write layer in memory capped at the disk size,
// and no cgroups of runsc's own (airlock makes the sandbox's and starts
// runsc in it: cgroup_linux.go).
func (r *Runtime) runscArgs(disk int64) []string {
	a := []string{"--root", filepath.Join(r.stateRoot(), "runsc"), "--platform", "systrap", "--network", "none",
		"--sidecar-usage-policy=LEGACY_DEPRECATED_SLOW_EMBEDDED_FALLBACK", "--ignore-cgroups"}
	if disk > 0 {
		a = append(a, "--overlay2", "root:memory,size="+strconv.FormatInt(disk, 10))
	}
	if os.Geteuid() != 0 {
		a = append(a, "--rootless")
	}
	return a
}

// Create implements runtime.Runtime.
func (r *Runtime) Create(ctx context.Context, spec *runtime.Spec) (_ runtime.Sandbox, retErr error) {
	runsc := r.Runsc
	if runsc == "" {
		var err error
		if runsc, err = Find(); err != nil {
			return nil, err
		}
	}
	if err := unsupported(spec); err != nil {
		return nil, err
	}
	if r.Agent && (r.OneShot || !r.Detached) {
		return nil, errors.New("gvisor: agent sandboxes are detached and not one-shot")
	}
	if spec.Image != "" {
		if fi, err := os.Stat(spec.Image); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("filesystem: image %s: not a root filesystem directory: %w", spec.Image, runtime.ErrInvalid)
		}
	}
	id := spec.ID
	if id == "" {
		id = native.NewID()
	} else if !native.IsID(id) {
		return nil, fmt.Errorf("sandbox id %q: want 16 lowercase hex digits: %w", id, runtime.ErrInvalid)
	}
	tStart := time.Now()
	root := r.stateRoot()
	rundir.For(root)
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	go sweep(runsc, r)
	dir := filepath.Join(root, id)
	if err := os.Mkdir(dir, 0o711); err != nil {
		if os.IsExist(err) {
			return nil, fmt.Errorf("sandbox %s: %w", id, runtime.ErrExists)
		}
		return nil, fmt.Errorf("state directory: %w", err)
	}
	sb := &sandbox{id: id, dir: dir, runsc: runsc, rt: r, done: make(chan struct{}),
		global: r.runscArgs(orDefault(spec.Limits.Disk, defaultDisk))}
	sb.rlimits = rlimits(spec)
	sb.listen = spec.Listen
	sb.info = runtime.Info{ID: id, Runtime: Name, Rootless: os.Geteuid() != 0, Steps: map[string]time.Duration{}}
	defer func() {
		if retErr != nil {
			sb.Destroy(context.WithoutCancel(ctx))
		}
	}()
	if err := writeOwner(dir, r.Detached); err != nil {
		return nil, err
	}

	ws := spec.Workspace
	if ws != "" {
		abs, err := filepath.Abs(ws)
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("workspace %s: not a directory", abs)
		}
		ws = abs
	}
	sb.info.Steps["state"] = time.Since(tStart)
	t := time.Now()
	initPath, err := initProgram(root)
	if err != nil {
		return nil, fmt.Errorf("sandbox init program: %w", err)
	}
	sb.info.Steps["init.program"] = time.Since(t)
	t = time.Now()
	var etc string
	if spec.Image == "" {
		if etc, err = native.EtcCache(native.DefaultStateRoot()); err != nil {
			return nil, fmt.Errorf("filesystem: %w", err)
		}
	}
	sb.info.Steps["etc"] = time.Since(t)
	t = time.Now()
	seccompPath := ""
	if !spec.Insecure.NoSeccomp {
		sb.seccomp = true
		sb.filter = encodeFilter(spec.Seccomp)
		// A one-shot sandbox's init gets the program in its environment
		// (Exec): no file to open through the Gofer on the command's
		// start path.
		if !r.OneShot {
			seccompPath = filepath.Join(dir, "seccomp.bpf")
			if err := os.WriteFile(seccompPath, sb.filter, 0o444); err != nil {
				return nil, err
			}
		}
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return nil, err
	}
	// Egress: the supervisor's end of each Spec.Listen address is a unix
	// socket here, bound read-only into the sandbox, where the init
	// relays the loopback address to it (runsc --host-uds=open lets the
	// sandbox connect to host sockets it can see, i.e. its binds).
	egressDir := ""
	if len(spec.Listen) > 0 {
		egressDir = filepath.Join(dir, "egress")
		if err := os.Mkdir(egressDir, 0o755); err != nil {
			return nil, err
		}
		for i := range spec.Listen {
			l, err := net.Listen("unix", filepath.Join(egressDir, fmt.Sprintf("%d.sock", i)))
			if err != nil {
				return nil, fmt.Errorf("egress socket: %w", err)
			}
			sb.listeners = append(sb.listeners, l)
		}
		sb.global = append(sb.global, "--host-uds=open")
	}
	if ws != "" {
		// Idmapped to its owner, and the overlay over it when asked
		// (overlay_linux.go).
		if ws, err = mountWorkspace(dir, ws, spec.WorkspaceLayer, spec.WorkspaceLayerVolatile, initPath); err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
	}
	b, err := ociSpec(id, spec, rootfs, ws, etc, initPath, seccompPath, egressDir, !r.Detached)
	if b != nil {
		sb.placeholders = b.placeholder
	}
	if err != nil {
		return nil, err
	}
	if r.Agent {
		if err := sb.agentBundle(b, rootfs, spec.Image == ""); err != nil {
			return nil, err
		}
	}
	if !r.OneShot {
		// A one-shot sandbox's is written with its command (Exec).
		raw, err := json.Marshal(b.spec)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o600); err != nil {
			return nil, err
		}
	}
	sb.info.Steps["bundle"] = time.Since(t)
	if !spec.Insecure.NoCgroups {
		t = time.Now()
		cg, err := newCgroup(dir, id, spec)
		if err != nil {
			return nil, err
		}
		sb.cg = cg
		sb.info.CgroupPaths = cg.Paths()
		sb.info.Steps["cgroups"] = time.Since(t)
	}

	if r.OneShot {
		sb.oneShot, sb.spec = true, b.spec
		if sb.pid1, err = pid1Program(root); err != nil {
			return nil, fmt.Errorf("sandbox init program: %w", err)
		}
		return sb, nil
	}

	// The container's init: stdin is the watch pipe (airlock run) or
	// /dev/null; its stdout and stderr, and runsc's messages, go to a file
	// that is read when runsc fails.
	t0 := time.Now()
	logf, err := os.OpenFile(filepath.Join(dir, "runsc.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(runsc, append(sb.global, "run", "--detach", "--bundle", dir, id)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if !r.Detached {
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer pr.Close()
		sb.watch = pw
		cmd.Stdin = pr
	}
	sb.created = true
	if err := startIn(sb.cg, cmd); err != nil {
		var le *native.LayerError
		if errors.As(err, &le) {
			return nil, err
		}
		return nil, fmt.Errorf("gvisor: runsc run: %v: %s", err, sb.log())
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("gvisor: runsc run: %v: %s", err, sb.log())
	}
	sb.info.Steps["runsc.run"] = time.Since(t0)
	if r.Agent {
		return sb.startAgent(ctx)
	}
	return sb, nil
}

// cgroupDirs are the host directories of the cgroup runsc makes (or made)
// at path: one on cgroup v2, one per mounted controller hierarchy on v1.
func cgroupDirs(path string) []string {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return []string{filepath.Join("/sys/fs/cgroup", path)}
	}
	var dirs []string
	hs, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	for _, h := range hs {
		d := filepath.Dir(h)
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() || filepath.Base(d) == "unified" {
			continue
		}
		dirs = append(dirs, filepath.Join(d, path))
	}
	return dirs
}

// initProgram returns a host file holding airlock's init program, to be
// bound read-only into sandboxes: the embedded one, or this executable.
func initProgram(root string) (string, error) {
	if len(initbin.Bin()) == 0 {
		return os.Executable()
	}
	return cachedProgram(root, "init", initbin.Bin())
}

// pid1Program is initProgram for cmd/airlock-pid1: its host file, or ""
// when this build embeds none.
func pid1Program(root string) (string, error) {
	if len(initbin.Pid1()) == 0 {
		return "", nil
	}
	return cachedProgram(root, "pid1", initbin.Pid1())
}

// cachedProgram is root's read-only copy of the embedded program name for
// this build (progfile.Cached: made once, other builds' copies removed
// after a minute, since one written in the last minute may be about to be
// mounted by another build's run).
func cachedProgram(root, name string, bin []byte) (string, error) {
	f, err := progfile.Cached(root, name, initbin.BuildID, bin)
	if err != nil {
		return "", fmt.Errorf("gvisor: the %s program in %s: %w", name, root, err)
	}
	f.Close()
	return f.Name(), nil
}

// owner records who made a sandbox, for the sweep: a non-detached sandbox
// whose supervisor is gone is deleted by the next Create.
type owner struct {
	Pid      int    `json:"pid"`
	Start    string `json:"start"`
	Detached bool   `json:"detached"`
}

func writeOwner(dir string, detached bool) error {
	raw, _ := json.Marshal(owner{Pid: os.Getpid(), Start: sysfile.SelfStart(), Detached: detached})
	return os.WriteFile(filepath.Join(dir, "owner.json"), raw, 0o600)
}

var sweepMu sync.Mutex

// sweep deletes the sandboxes of supervisors that died without destroying
// them (their init already ended with its watch pipe; runsc's state, the
// cgroup and the bundle remain).
func sweep(runsc string, r *Runtime) {
	if !sweepMu.TryLock() {
		return
	}
	defer sweepMu.Unlock()
	root := r.stateRoot()
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !native.IsID(e.Name()) {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(root, e.Name(), "owner.json"))
		if err != nil {
			continue
		}
		var o owner
		if json.Unmarshal(raw, &o) != nil || o.Detached || o.Pid == os.Getpid() {
			continue
		}
		if st := sysfile.ProcStart(o.Pid); st != "" && st == o.Start {
			continue
		}
		sb := &sandbox{id: e.Name(), dir: filepath.Join(root, e.Name()), runsc: runsc, rt: r, done: make(chan struct{}), created: true,
			global: r.runscArgs(0)}
		sb.cg, _, _ = openCgroup(sb.dir)
		sb.Destroy(context.Background())
	}
}

// sandbox is the supervisor's handle on one gVisor sandbox.
type sandbox struct {
	id, dir, runsc string
	rt             *Runtime
	global         []string
	info           runtime.Info
	seccomp        bool
	listen         []string       // Spec.Listen
	listeners      []net.Listener // their host ends, for the egress gateway
	oneShot        bool           // Runtime.OneShot
	pid1           string         // one-shot: the host file of cmd/airlock-pid1 ("": none embedded)
	filter         []byte         // the policy's seccomp program (encodeFilter), when seccomp is on
	cg             *cgroup.Cgroup // the host cgroup airlock made (nil: none)
	spec           *specs.Spec    // the bundle's spec (one-shot: its process is the command)
	ran            bool           // one-shot: the command was started
	rlimits        []specs.POSIXRlimit
	placeholders   []string
	watch          *os.File // write end of the init's stdin (non-detached)
	created        bool     // runsc run was called: delete it on Destroy
	destroy        sync.Once
	destroyErr     error
	done           chan struct{}
}

var (
	_ runtime.Sandbox   = (*sandbox)(nil)
	_ runtime.Pauser    = (*sandbox)(nil)
	_ runtime.Watcher   = (*sandbox)(nil)
	_ runtime.Listeners = (*sandbox)(nil)
)

// Listeners implements runtime.Listeners: the host ends of Spec.Listen.
func (sb *sandbox) Listeners() []net.Listener { return sb.listeners }

func (sb *sandbox) ID() string            { return sb.id }
func (sb *sandbox) Info() runtime.Info    { return sb.info }
func (sb *sandbox) Done() <-chan struct{} { return sb.done }

// log returns the last lines runsc wrote for this sandbox.
func (sb *sandbox) log() string {
	b, _ := os.ReadFile(filepath.Join(sb.dir, "runsc.log"))
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return strings.ReplaceAll(s, "\n", "; ")
}

func (sb *sandbox) runscCmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, sb.runsc, append(append([]string(nil), sb.global...), args...)...)
}

func (sb *sandbox) run(ctx context.Context, args ...string) error {
	out, err := sb.runscCmd(ctx, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("runsc %s: %v: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

// running asks runsc whether the sandbox still runs.
func (sb *sandbox) running() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := sb.runscCmd(ctx, "state", sb.id).Output()
	if err != nil {
		return false
	}
	var st struct {
		Status string `json:"status"`
		Pid    int    `json:"pid"`
	}
	if json.Unmarshal(out, &st) != nil || st.Status != "running" {
		return false
	}
	// runsc says running until it notices its sandbox process is gone;
	// a dead (or zombie) process is not running.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", st.Pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] != 'Z' && b[i+2] != 'X'
}

// lost reports a sandbox that stopped running, waiting up to a second for
// runsc and the host to notice.
func (sb *sandbox) lost() bool {
	for i := 0; i < 10; i++ {
		if !sb.running() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// Kill implements runtime.Sandbox.
func (sb *sandbox) Kill() error {
	return sb.run(context.Background(), "kill", "--all", sb.id, "KILL")
}

// Pause implements runtime.Pauser.
func (sb *sandbox) Pause(ctx context.Context) error { return sb.run(ctx, "pause", sb.id) }

// Resume implements runtime.Pauser.
func (sb *sandbox) Resume(ctx context.Context) error { return sb.run(ctx, "resume", sb.id) }

// Destroy implements runtime.Sandbox: the init's watch pipe closes, runsc
// deletes the container (retried: a delete right after a kill can race),
// placeholders still empty are removed, then the bundle.
func (sb *sandbox) Destroy(ctx context.Context) error {
	sb.destroy.Do(func() {
		defer close(sb.done)
		for _, l := range sb.listeners {
			l.Close()
		}
		if sb.watch != nil {
			sb.watch.Close()
		}
		if sb.created {
			// An attached `runsc run` that ended deleted its container
			// itself (one killed under us left its state to delete), and
			// a `runsc run` that failed early made none: nothing for
			// runsc to delete when it keeps no state for the id.
			if m, _ := filepath.Glob(filepath.Join(sb.rt.stateRoot(), "runsc", "*"+sb.id+"*")); len(m) == 0 {
				sb.created = false
			}
		}
		if sb.created {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
			defer cancel()
			var err error
			for i := 0; i < 20; i++ {
				if err = sb.run(ctx, "delete", "--force", sb.id); err == nil || strings.Contains(err.Error(), "does not exist") {
					err = nil
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				sb.destroyErr = err
				return // keep the bundle: the next sweep retries
			}
		}
		if sb.cg != nil {
			// Whatever runsc left (nothing, normally) is killed, then
			// the cgroup removed.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := sb.cg.Destroy(ctx); err != nil {
				sb.destroyErr = fmt.Errorf("%s: %w", cgroupLayer, err)
				return // keep the bundle (and cgroup.json): the next sweep retries
			}
		}
		// runsc keeps a lock file (and its control socket) for an id
		// whose container it never recorded, as when the sandbox was
		// killed while it started (over its memory limit): `delete` then
		// finds nothing to delete and they stay. Nothing of the sandbox
		// runs by now (deleted, and its cgroup emptied).
		if m, _ := filepath.Glob(filepath.Join(sb.rt.stateRoot(), "runsc", "*"+sb.id+"*")); len(m) > 0 {
			for _, f := range m {
				os.Remove(f)
			}
		}
		for i := len(sb.placeholders) - 1; i >= 0; i-- {
			native.RemovePlaceholder(sb.placeholders[i]) // only if still one
		}
		if err := unmountWorkspace(sb.dir); err != nil {
			// Never remove through a workspace mount (see
			// unmountWorkspace): the next sweep retries.
			sb.destroyErr = err
			return
		}
		sb.destroyErr = os.RemoveAll(sb.dir)
	})
	return sb.destroyErr
}

// Exec implements runtime.Sandbox: `runsc exec` of airlock's init in
// ExecMain mode, with the command's stdio as given and a status pipe as
// fd 3 that tells whether the command started.
func (sb *sandbox) Exec(ctx context.Context, req *runtime.ExecRequest) (_ runtime.Process, retErr error) {
	var ptyMaster *os.File
	if len(req.Argv) == 0 {
		return nil, errors.New("exec: empty command")
	}
	if req.Capture {
		return nil, fmt.Errorf("captured output (background processes of the service): %w", ErrUnsupported)
	}
	args := []string{guestInit, ExecArg}
	if sb.seccomp {
		args = append(args, "--seccomp")
	}
	if req.TTY {
		args = append(args, "--tty")
	}
	env := append([]string(nil), req.Env...)
	// A one-shot sandbox's PID 1 is airlock-pid1 when this build embeds
	// it: it does what airlock-init does without starting the Go runtime
	// (15-19 ms of system calls through the Sentry), and starts
	// airlock-init as the relay of the egress forwards beside the
	// command, not before it.
	pid1 := sb.oneShot && sb.pid1 != ""
	if sb.oneShot {
		args = append(args, forwardArgs(&runtime.Spec{Listen: sb.listen})...)
		if pid1 && len(sb.listen) > 0 {
			args = append(args, "--relay="+guestRelay)
		}
		args = append(args, "--init", "--")
		env = append(env, argvEnv+"="+EncodeArgv(req.Argv))
		if sb.seccomp {
			env = append(env, seccompEnv+"="+base64.StdEncoding.EncodeToString(sb.filter))
		}
	} else {
		args = append(append(args, "--"), req.Argv...)
	}
	if initbin.BuildID != "" {
		env = append(env, initbin.BuildEnv+"="+initbin.BuildID)
	}
	dir := req.Dir
	if dir == "" {
		dir = "/workspace"
	}
	proc := sandboxProcess(args, env, dir, sb.rlimits)
	var ptySlave *os.File
	if req.TTY {
		// runsc exec hands its own stdio to the process as its terminal
		// when the process asks for one: a new pty from the host's
		// devpts, whose master stays here.
		proc.Terminal = true
		master, slave, err := openPTY(req.Rows, req.Cols)
		if err != nil {
			return nil, fmt.Errorf("terminal: %w", err)
		}
		ptySlave = slave
		defer slave.Close()
		defer func() {
			if retPTY := master; retPTY != nil && (retErr != nil) {
				retPTY.Close()
			}
		}()
		ptyMaster = master
	}
	f, err := os.CreateTemp(sb.dir, "process-*.json")
	if err != nil {
		return nil, err
	}
	procFile := f.Name()
	defer os.Remove(procFile)
	if err := json.NewEncoder(f).Encode(proc); err != nil {
		f.Close()
		return nil, err
	}
	f.Close()
	pidFile := procFile + ".pid"

	sr, sw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer sr.Close()
	p := &process{sb: sb, pidFile: pidFile, exit: make(chan struct{})}
	var cmd *exec.Cmd
	if sb.oneShot {
		if sb.ran {
			return nil, fmt.Errorf("sandbox %s runs one command (one-shot) and has run it", sb.id)
		}
		sb.ran = true
		spec := *sb.spec
		spec.Process = proc
		if pid1 {
			// airlock-pid1 where the init would be, and the init (for
			// the relay) beside it.
			spec.Mounts = slices.Clone(spec.Mounts)
			for i := range spec.Mounts {
				if spec.Mounts[i].Destination != guestInit {
					continue
				}
				if len(sb.listen) > 0 {
					relay := spec.Mounts[i]
					relay.Destination = guestRelay
					spec.Mounts = append(spec.Mounts, relay)
				}
				spec.Mounts[i].Source = sb.pid1
				break
			}
		}
		raw, err := json.Marshal(&spec)
		if err == nil {
			err = os.WriteFile(filepath.Join(sb.dir, "config.json"), raw, 0o600)
		}
		if err != nil {
			sw.Close()
			return nil, err
		}
		// The command is the container's PID 1; attached, so that runsc's
		// sandbox and gofer die with this runsc, and it with us.
		cmd = sb.runscCmd(context.Background(), "run", "--bundle", sb.dir, "--pass-fd", "3:3", sb.id)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL}
		p.fixedPid = 1
		sb.created = true
	} else {
		cmd = sb.runscCmd(context.Background(), "exec", "--process", procFile, "--internal-pid-file", pidFile, "--pass-fd", "3:3", sb.id)
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if ptySlave != nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ptySlave, ptySlave, ptySlave
		cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
		p.pty = ptyMaster
	}
	cmd.ExtraFiles = []*os.File{sw}
	var errBuf bytes.Buffer
	var copies sync.WaitGroup
	stdio := []struct {
		f   *os.File
		in  bool
		dst *io.Reader
		out *io.Writer
	}{{req.Stdin, true, &cmd.Stdin, nil}, {req.Stdout, false, nil, &cmd.Stdout}, {req.Stderr, false, nil, &cmd.Stderr}}
	for i, s := range stdio {
		if ptySlave != nil {
			break // the terminal is the process's stdio
		}
		switch {
		case s.f == nil && s.in:
			*s.dst = nil
		case s.f == nil && i == 2:
			*s.out = &errBuf
		case s.f == nil:
			*s.out = nil
		case s.in:
			*s.dst = s.f
		case needsPipe(s.f):
			// gVisor writes a regular file from its own offset 0 unless
			// it is in append mode: copy through a pipe instead.
			pr, pw, err := os.Pipe()
			if err != nil {
				sw.Close()
				return nil, err
			}
			*s.out = pw
			p.closeAfter = append(p.closeAfter, pw)
			copies.Add(1)
			go func(dst *os.File) { defer copies.Done(); io.Copy(dst, pr); pr.Close() }(s.f)
		default:
			*s.out = s.f
		}
	}
	var in *cgroup.Cgroup
	if sb.oneShot {
		in = sb.cg // runsc run starts the sandbox: in its cgroup
	}
	if err := startIn(in, cmd); err != nil {
		sw.Close()
		p.closePipes()
		var le *native.LayerError
		if errors.As(err, &le) {
			return nil, err
		}
		return nil, fmt.Errorf("runsc exec: %w", err)
	}
	sw.Close()
	p.cmd = cmd
	if ptySlave != nil {
		ptySlave.Close()
	}
	go func() {
		err := cmd.Wait()
		p.closePipes()
		copies.Wait()
		p.status = statusOf(cmd.ProcessState, err)
		if p.status.Code == 128 && sb.lost() {
			// runsc lost the sandbox under the process (the whole
			// sandbox was killed, e.g. by its memory limit): the
			// process was killed with it.
			p.status = runtime.ExitStatus{Signal: int(unix.SIGKILL)}
		}
		close(p.exit)
	}()
	line, _ := bufio.NewReader(io.LimitReader(sr, 4096)).ReadString('\n')
	line = strings.TrimSuffix(line, "\n")
	if line != "ok" && line != "" {
		<-p.exit
		code, msg, _ := strings.Cut(line, " ")
		n, _ := strconv.Atoi(code)
		return nil, &startError{code: n, msg: msg}
	}
	if line == "" {
		// Nothing said: runsc failed before the command could start
		// (exit 128, its message on stderr, which we hold only when we
		// own stderr).
		<-p.exit
		if sb.cg != nil && sb.cg.OOMKilled() {
			// The Sentry, Gofer and stubs share the sandbox's memory
			// limit: too small a one kills them while they start.
			return nil, fmt.Errorf("the sandbox ran out of memory before the command started: the memory limit covers gVisor's Sentry and Gofer too; raise --memory (resources.memory)")
		}
		msg := strings.TrimSpace(errBuf.String())
		if msg == "" {
			msg = "runsc said nothing (run with --verbose, or see runsc's log)"
		}
		return nil, fmt.Errorf("runsc exec: exit %d: %s", p.status.ShellCode(), msg)
	}
	return p, nil
}

// startError is a command that could not start: not found (127) or not
// executable (126).
type startError struct {
	code int
	msg  string
}

func (e *startError) Error() string { return e.msg }

// Unwrap gives the kind callers test for (exit codes 127 and 126).
func (e *startError) Unwrap() error {
	if e.code == 127 {
		return runtime.ErrCommandNotFound
	}
	return runtime.ErrNotExecutable
}

// needsPipe reports a regular file opened without O_APPEND.
func needsPipe(f *os.File) bool {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	return err == nil && fl&unix.O_APPEND == 0
}

func statusOf(ps *os.ProcessState, err error) runtime.ExitStatus {
	if ps == nil {
		return runtime.ExitStatus{Signal: int(unix.SIGKILL)}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return runtime.ExitStatus{Signal: int(ws.Signal())}
	}
	code := ps.ExitCode()
	if code > 128 && code < 128+65 {
		// runsc reports a process killed by signal N as 128+N.
		return runtime.ExitStatus{Signal: code - 128}
	}
	return runtime.ExitStatus{Code: code}
}

// process is a command started with runsc exec.
type process struct {
	sb         *sandbox
	cmd        *exec.Cmd
	pidFile    string
	closeAfter []*os.File
	pty        *os.File
	fixedPid   int // one-shot: the command is PID 1
	closeOnce  sync.Once
	status     runtime.ExitStatus
	exit       chan struct{}
}

func (p *process) closePipes() {
	p.closeOnce.Do(func() {
		for _, f := range p.closeAfter {
			f.Close()
		}
	})
}

// Pid is the process's pid inside the sandbox, 0 while unknown.
func (p *process) Pid() int {
	if p.fixedPid != 0 {
		return p.fixedPid
	}
	b, err := os.ReadFile(p.pidFile)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func (p *process) PTY() *os.File { return p.pty }

// Signal sends sig to the process through runsc (runsc exec forwards
// signals only for terminals).
func (p *process) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("signal %v: not a syscall signal", sig)
	}
	pid := 0
	for i := 0; i < 50 && pid == 0; i++ {
		select {
		case <-p.exit:
			return nil
		default:
		}
		if pid = p.Pid(); pid == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if pid == 0 {
		return errors.New("signal: the process's pid inside the sandbox is not known yet")
	}
	// To the process group it leads (it called setsid), like the native
	// runtime; to the process alone if that fails.
	if err := p.sb.run(context.Background(), "kill", "--pgid", strconv.Itoa(pid), p.sb.id, strconv.Itoa(int(s))); err == nil {
		return nil
	}
	return p.sb.run(context.Background(), "kill", "--pid", strconv.Itoa(pid), p.sb.id, strconv.Itoa(int(s)))
}

func (p *process) Wait(ctx context.Context) (runtime.ExitStatus, error) {
	select {
	case <-p.exit:
		os.Remove(p.pidFile)
		return p.status, nil
	case <-ctx.Done():
		return runtime.ExitStatus{}, ctx.Err()
	}
}
