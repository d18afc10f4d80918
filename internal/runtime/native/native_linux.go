// Package native is airlock's default runtime: a sandbox made of Linux
// namespaces (user, mount, PID, network, IPC, UTS, cgroup), a private root
// filesystem under pivot_root, dropped capabilities, Landlock, seccomp-BPF,
// cgroups and rlimits.
//
// The supervisor side (this file) creates the sandbox by re-executing the
// airlock binary as the sandbox's init (InitMain), places it in its cgroup,
// sends it the setup over a socket pair that only the supervisor holds, and
// then talks to the agent that the init becomes. It must never start a
// sandbox with a layer missing that the Spec did not explicitly opt out of.
package native

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/initbin"
	"github.com/airlock-dev/airlock/internal/quota"
	"github.com/airlock-dev/airlock/internal/rundir"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/spawn"
	"github.com/airlock-dev/airlock/internal/sysfile"
	"github.com/airlock-dev/airlock/internal/uidpool"
)

// Defaults for sizes the Spec leaves at zero.
const (
	defaultDisk = 1 << 30
	defaultTmp  = 512 << 20
	defaultShm  = 64 << 20
)

// reaperDelay is how long a sandbox lives before its reaper starts. Most
// one-shot commands end sooner and never pay for a second process; if the
// supervisor is killed inside this window, the next airlock to start sweeps
// what it left (see sweep).
const reaperDelay = 100 * time.Millisecond

// setupTimeout bounds how long the init may take to build the sandbox.
const setupTimeout = 30 * time.Second

// Runtime is the native runtime.
type Runtime struct {
	// Exe is the program to execute as the sandbox's init (the airlock
	// binary or airlock-init). Empty: the init embedded in this binary,
	// else /proc/self/exe (see initProgram).
	Exe string
	// StateRoot holds one directory per sandbox. Empty: /run/airlock as
	// root, else $XDG_RUNTIME_DIR/airlock or /tmp/airlock-<uid>.
	StateRoot string
	// Detached sandboxes outlive this process (a daemon that restarts):
	// no parent-death signal, and the agent waits on a socket in the state
	// directory for the next supervisor (Adopt) instead of ending with its
	// channel. Destroy kills them explicitly.
	Detached bool
	// Reaper starts, for each sandbox, a small process that cleans up the
	// sandbox's host state if this process is killed (SIGKILL) before it
	// could destroy the sandbox. For one-shot supervisors like `airlock
	// run`; a daemon re-adopts its sandboxes instead.
	Reaper bool
	// Volumes holds fresh workspaces (Spec.Workspace empty) on host
	// storage: each is a volume capped at the sandbox's disk limit, named
	// after the sandbox, removed with it. Nil: a fresh workspace is a
	// tmpfs inside the sandbox capped at the disk limit (in memory,
	// counted against the sandbox's memory limit). A workspace the caller
	// names is the caller's directory and is not capped.
	Volumes *quota.Volumes
	// UIDPool is where, as root, each sandbox's host uid and gid range
	// is leased from. Nil: uidpool.Resolve(nil) (root's subordinate ids,
	// else uidpool.Default). Unused rootless: root inside is the caller.
	UIDPool *uidpool.Pool
	// Sleep lets the agents of detached sandboxes sleep when asked
	// (Sandbox.Sleep, sleep_linux.go), where this build has the sleeper
	// (linux/amd64) and the host executes memfds.
	Sleep bool
}

var _ runtime.Runtime = (*Runtime)(nil)

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "native" }

func (r *Runtime) stateRoot() string {
	if r.StateRoot != "" {
		return r.StateRoot
	}
	return DefaultStateRoot()
}

// DefaultStateRoot is where sandboxes keep their host-side state.
func DefaultStateRoot() string {
	if os.Geteuid() == 0 {
		return "/run/airlock"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "airlock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("airlock-%d", os.Geteuid()))
}

// Create implements runtime.Runtime.
func (r *Runtime) Create(ctx context.Context, spec *runtime.Spec) (runtime.Sandbox, error) {
	sb, _, err := r.create(ctx, spec, nil)
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// CreateExec implements runtime.FirstExecer: req's request follows the
// setup on the control channel, and the init's agent finds it waiting as
// soon as it sent ready.
func (r *Runtime) CreateExec(ctx context.Context, spec *runtime.Spec, req *runtime.ExecRequest) (runtime.Sandbox, runtime.Process, error) {
	sb, p, err := r.create(ctx, spec, req)
	if err != nil {
		return nil, nil, err
	}
	t0 := time.Now()
	proc, err := sb.started(ctx, p)
	sb.info.Steps["started"] = time.Since(t0)
	if err != nil {
		return sb, nil, err
	}
	return sb, proc, nil
}

// create makes the sandbox and, with first, sends first's request after
// the setup (the process it returns has not started yet).
func (r *Runtime) create(ctx context.Context, spec *runtime.Spec, first *runtime.ExecRequest) (_ *sandbox, _ *process, retErr error) {
	if builtWithCgo && len(initbin.Bin()) == 0 {
		// The init would be this binary, and it could not set secure bits,
		// capabilities and no_new_privs on all of its threads.
		return nil, nil, &LayerError{Layer: layerCaps, Err: errors.New("this airlock was built with cgo, and its sandbox init cannot drop privileges on every thread"),
			Fix: "rebuild with CGO_ENABLED=0, as `make build` does"}
	}
	if !spec.Insecure.NoSeccomp && len(spec.Seccomp) == 0 {
		return nil, nil, &LayerError{Layer: layerSeccomp, Err: errors.New("no seccomp filter in the spec"), Fix: "compile the default profile, or pass --insecure-no-seccomp"}
	}
	if spec.Image != "" {
		if err := CheckImage(spec.Image); err != nil {
			return nil, nil, &LayerError{Layer: layerFilesystem, Err: err}
		}
	}
	steps := map[string]time.Duration{}
	var cu cleanup
	defer func() {
		if retErr != nil {
			cu.run()
		}
	}()

	id := spec.ID
	if id == "" {
		id = newID()
	} else if !isID(id) {
		return nil, nil, fmt.Errorf("sandbox id %q: want 16 lowercase hex digits: %w", id, runtime.ErrInvalid)
	}
	root := r.stateRoot()
	// Clearing what dead supervisors left is not on this sandbox's path;
	// Destroy waits for it so a short-lived supervisor finishes the job.
	swept := make(chan struct{})
	go func() { sweep(root, r.Volumes); close(swept) }()
	cu.add(func() { <-swept })
	if err := ensureStateRoot(root); err != nil {
		return nil, nil, err
	}
	stateDir := filepath.Join(root, id)
	rootless := os.Geteuid() != 0
	if rootless && spec.RecordExec {
		return nil, nil, &LayerError{Layer: layerRecord, Err: errors.New("the activity record needs root (the proc connector needs CAP_NET_ADMIN on the host)"), Fix: "run as root, or without --record"}
	}
	var lease *uidpool.Lease
	if !rootless {
		// Leased before the state directory exists, released (last in
		// the rollback) only once it is gone and the init is dead.
		pool, err := r.pool()
		if err != nil {
			return nil, nil, &LayerError{Layer: layerNamespaces, Err: err, Fix: "see `airlock doctor` (uid pool)"}
		}
		if lease, err = leases.Acquire(pool, uidpool.Owner{Sandbox: id, StateDir: stateDir}); err != nil {
			return nil, nil, &LayerError{Layer: layerNamespaces, Err: err, Fix: "destroy sandboxes, or configure a larger uid pool (--uid-pool, uid_pool)"}
		}
		cu.add(func() { releaseLease(lease, stateDir) })
	}
	if err := os.Mkdir(stateDir, 0o711); err != nil {
		if lease != nil {
			lease.Release() // nothing of this sandbox exists yet
		}
		if os.IsExist(err) {
			return nil, nil, fmt.Errorf("sandbox %s: %w", id, runtime.ErrExists)
		}
		return nil, nil, fmt.Errorf("state directory: %w", err)
	}
	cu.add(func() { os.RemoveAll(stateDir) })
	if err := os.Mkdir(filepath.Join(stateDir, "root"), 0o755); err != nil {
		return nil, nil, err
	}

	sb := &sandbox{id: id, stateDir: stateDir, procs: map[uint64]*process{}, done: make(chan struct{}), swept: swept, detached: r.Detached, listen: spec.Listen, lease: lease, agentVersion: agent.Version, recordExec: spec.RecordExec}
	if spec.FirstProcessID > 1 {
		sb.idBase = spec.FirstProcessID - 1
		sb.nextID = sb.idBase
	}
	sb.info = runtime.Info{ID: id, Runtime: r.Name(), Rootless: rootless, Steps: steps}

	// A fresh workspace is a volume on host storage (Volumes) or a tmpfs
	// the init mounts (ws stays empty); either way capped at the disk limit.
	ws := spec.Workspace
	if spec.WorkspaceSnapshot != "" && (ws != "" || r.Volumes == nil) {
		return nil, nil, fmt.Errorf("a workspace from snapshot %s needs a fresh workspace on a volume: %w", spec.WorkspaceSnapshot, errdefs.ErrNotSupported)
	}
	var wst unix.Stat_t // a tmpfs workspace: as if owned by root
	// volumeMade, when set, waits for a fresh volume made meanwhile (see
	// below) and says whether it was.
	var volumeMade func() error
	if ws == "" {
		sb.tempWorkspace = true
		switch {
		case r.Volumes != nil && spec.WorkspaceSnapshot == "":
			// A fresh volume is made while the init starts: the init
			// needs it only with its setup, and making it (a clone of
			// the blank image, a loop device, an ext4 mount) took about
			// as long as everything before the clone. Its record is
			// known before (Planned): the state file names it, so a
			// sweep after a crash removes it, made or not.
			size := orDefault(spec.Limits.Disk, defaultDisk)
			planned, err := r.Volumes.Planned(id, size)
			if err != nil {
				return nil, nil, &LayerError{Layer: layerDisk, Err: err, Fix: fixFor(layerDisk)}
			}
			uid, gid := workspaceOwner()
			done := make(chan struct{})
			var verr error
			var took time.Duration
			go func() {
				defer close(done)
				t0 := time.Now()
				_, verr = r.Volumes.Create(id, size, uid, gid)
				took = time.Since(t0)
			}()
			cu.add(func() {
				<-done
				if verr == nil {
					planned.Remove()
				}
			})
			volumeMade = func() error {
				<-done
				if verr != nil {
					return &LayerError{Layer: layerDisk, Err: verr, Fix: fixFor(layerDisk)}
				}
				steps["volume"] = took
				// What the owner namespaces were made for, and what the
				// init is told, must be what was made.
				var st unix.Stat_t
				if err := unix.Stat(planned.Path, &st); err != nil || st.Uid != wst.Uid || st.Gid != wst.Gid || st.Mode&unix.S_IFMT != unix.S_IFDIR {
					return &LayerError{Layer: layerDisk, Err: fmt.Errorf("volume %s: not the empty directory of %d:%d it was made to be (%v)", planned.Path, wst.Uid, wst.Gid, err), Fix: fixFor(layerDisk)}
				}
				return nil
			}
			sb.volume, ws = planned, planned.Path
			wst.Uid, wst.Gid, wst.Mode = uint32(uid), uint32(gid), unix.S_IFDIR|0o755
		case r.Volumes != nil:
			t0 := time.Now()
			vol, err := r.Volumes.CreateFrom(id, orDefault(spec.Limits.Disk, defaultDisk), spec.WorkspaceSnapshot)
			if err != nil {
				return nil, nil, &LayerError{Layer: layerDisk, Err: err, Fix: fixFor(layerDisk)}
			}
			cu.add(func() { vol.Remove() })
			sb.volume, ws = vol, vol.Path
			steps["volume"] = time.Since(t0)
		}
	} else {
		abs, err := filepath.Abs(ws)
		if err != nil {
			return nil, nil, err
		}
		ws = abs
	}
	if ws != "" && volumeMade == nil {
		if err := unix.Stat(ws, &wst); err != nil {
			return nil, nil, fmt.Errorf("workspace %s: %w", ws, err)
		}
		if wst.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil, nil, fmt.Errorf("workspace %s: not a directory", ws)
		}
	}
	sb.workspace = ws
	if spec.WorkspaceLayer != "" && !sb.tempWorkspace {
		for _, d := range []string{"upper", "work"} {
			fi, err := os.Lstat(filepath.Join(spec.WorkspaceLayer, d))
			if err != nil || !fi.IsDir() {
				return nil, nil, &LayerError{Layer: layerWorkspace, Err: fmt.Errorf("layer directory %s: no %s directory", spec.WorkspaceLayer, d), Fix: fixFor(layerWorkspace)}
			}
		}
	}
	uid, gid, ids := os.Getuid(), os.Getgid(), 1
	if lease != nil {
		uid, gid, ids = lease.UID, lease.GID, uidpool.SlotSize
	}
	sb.info.HostUID, sb.info.HostGID, sb.info.HostIDs = uid, gid, ids
	if err := writeState(stateDir, &stateFile{Workspace: ws, Volume: sb.volume, HostUID: uid, HostGID: gid, Rootless: rootless}); err != nil {
		return nil, nil, fmt.Errorf("state directory: %w", err)
	}
	exe, exeEnv := r.initProgram()
	var owners *ownerNamespaces
	if !rootless {
		// The user namespaces that make the owners of the workspace and
		// the bind sources root inside, made while the init starts.
		owners = startOwnerNamespaces(exe, hostOwners(spec, &wst), uid, gid)
		defer owners.close()
	}

	// The init starts in its cgroup: on v2 it is cloned straight into it
	// (CLONE_INTO_CGROUP), on v1 as root it is forked from a thread inside
	// it (see threadIn), so the cgroup must exist first. Rootless on v1,
	// the cgroup is made while the init starts and the init is moved in
	// (it runs nothing of the sandbox's until it has the setup, and it
	// gets that only after it joined the cgroup).
	newCgroup := func() error {
		t0 := time.Now()
		cg, err := cgroup.New(spec.CgroupParent, cgroup.Prefix+"/"+id, cgroup.Limits{
			Memory: spec.Limits.Memory, Swap: spec.Limits.Swap, Pids: pidsLimit(spec.Limits.Pids), CPU: spec.Limits.CPU,
			CPUAccounting: spec.RecordExec, // the record's usage samples
		})
		if err != nil {
			fix := "run as root, delegate a cgroup to this user (--cgroup-parent), or pass --insecure-no-cgroups to run without resource limits"
			if errors.Is(err, cgroup.ErrBadParent) {
				fix = "" // the error says it
			}
			return &LayerError{Layer: layerCgroups, Err: err, Fix: fix}
		}
		sb.cg = cg
		sb.info.CgroupPaths = cg.Paths()
		cu.add(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cg.Destroy(ctx)
		})
		steps["cgroups"] = time.Since(t0)
		return nil
	}
	cgv2 := isCgroup2()
	// On v1, as root, the init is forked from a thread that has moved
	// into the cgroup alone (cgroup.EnterThread): that costs no RCU grace
	// period, moving the started init (Add) does, about 10 ms.
	threadIn := !cgv2 && !rootless
	if !spec.Insecure.NoCgroups && (cgv2 || threadIn) {
		if err := newCgroup(); err != nil {
			return nil, nil, err
		}
	}

	parentEnd, childEnd, err := agent.SocketPair()
	if err != nil {
		return nil, nil, err
	}
	cu.add(func() { parentEnd.Close() })
	attr := initAttr(uid, gid, ids, rootless, childEnd)
	attr.Env = append(attr.Env, exeEnv...)
	if r.Detached {
		attr.Sys.Pdeathsig = 0
	}
	if sb.cg != nil {
		if fd, ok := sb.cg.FD(); ok {
			attr.Sys.UseCgroupFD = true
			attr.Sys.CgroupFD = fd
		}
	}
	t0 := time.Now()
	var pid int
	if rootless {
		pid, err = spawn.ForkExec(exe, []string{"airlock", InitArg}, attr)
	} else {
		var in *cgroup.Cgroup
		if threadIn {
			in = sb.cg
		}
		pid, err = forkOwned(exe, []string{"airlock", InitArg}, attr, uid, gid, in)
	}
	childEnd.Close()
	var le *LayerError
	if errors.As(err, &le) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, &LayerError{Layer: layerNamespaces, Err: fmt.Errorf("start sandbox init: %w", err),
			Fix: "airlock needs user namespaces: check that /proc/sys/user/max_user_namespaces > 0 and, on Debian/Ubuntu, kernel.unprivileged_userns_clone=1 (or the AppArmor userns restriction) allows them, or run as root"}
	}
	steps["clone"] = time.Since(t0)
	sb.initPid, sb.initPidFD = pid, *attr.Sys.PidFD
	sb.exited = make(chan struct{})
	go sb.waitInit()
	cu.add(sb.closePidFD)
	cu.add(func() { sb.killInit(); <-sb.exited })
	if lease != nil {
		if err := lease.SetInit(pid); err != nil {
			return nil, nil, &LayerError{Layer: layerNamespaces, Err: err}
		}
	}

	if !spec.Insecure.NoCgroups && !cgv2 && !threadIn {
		if err := newCgroup(); err != nil {
			return nil, nil, err
		}
		t0 = time.Now()
		if err := sb.cg.Add(sb.initPid); err != nil {
			return nil, nil, &LayerError{Layer: layerCgroups, Err: err, Fix: "check cgroup permissions, or pass --insecure-no-cgroups"}
		}
		steps["cgroups"] += time.Since(t0)
	}

	if volumeMade != nil {
		if err := volumeMade(); err != nil {
			return nil, nil, err
		}
	}
	st, fds, err := sb.buildSetup(spec, root, sb.initPid, owners)
	defer func() {
		for _, f := range fds {
			f.Close()
		}
	}()
	if err != nil {
		return nil, nil, err
	}
	if r.Detached && r.Sleep && !spec.RecordExec {
		// The exec listener would stop the agent's own execs (and
		// record them): a recorded sandbox stays awake.
		if progs, err := sleepPrograms(); err == nil {
			// Copies: fds are closed once sent, the programs are shared.
			a, errA := dupFile(progs[0])
			b, errB := dupFile(progs[1])
			if errA == nil && errB == nil {
				fds = append(fds, a, b)
				st.Sleep = true
			} else {
				a.Close()
				b.Close()
			}
		}
	}
	if r.Detached {
		ln, err := listenAgent(stateDir)
		if err != nil {
			return nil, nil, fmt.Errorf("agent socket: %w", err)
		}
		fds = append(fds, ln) // closed here once sent; the init keeps its copy
		st.Detached = true
	}

	t0 = time.Now()
	raw := st.encode()
	conn := agent.NewConn(parentEnd)
	sb.conn = conn
	intFDs := make([]int, len(fds))
	for i, f := range fds {
		intFDs[i] = int(f.Fd())
	}
	if err := conn.Send(&agent.Message{Type: agent.TypeSetup, Setup: raw}, intFDs...); err != nil {
		return nil, nil, fmt.Errorf("send setup to sandbox init: %w", err)
	}
	var firstProc *process
	if first != nil {
		// The init reads it once it is ready; a failed setup drops it
		// with the channel.
		if firstProc, err = sb.sendExec(first); err != nil {
			return nil, nil, err
		}
	}
	ready, err := sb.awaitReady(ctx)
	if err != nil {
		return nil, nil, err
	}
	cu.add(sb.closeListeners)
	cu.add(func() {
		if sb.execListener != nil {
			sb.execListener.Close()
		}
	})
	if spec.RecordExec && sb.execListener == nil {
		return nil, nil, &LayerError{Layer: layerRecord, Err: errors.New("no exec listener from the sandbox init")}
	}
	if spec.RecordExec && r.Detached && ready.ExecListenerFD <= 0 {
		// Without the init's copy, the listener would close with this
		// process and execs inside would fail (ENOSYS) rather than wait.
		return nil, nil, &LayerError{Layer: layerRecord, Err: errors.New("the sandbox init keeps no copy of the exec listener for a later supervisor")}
	}
	sb.execListenerFD = ready.ExecListenerFD
	sb.rootFD = ready.RootFD
	if len(sb.listeners) != len(spec.Listen) {
		return nil, nil, &LayerError{Layer: layerNamespaces, Err: fmt.Errorf("asked for %d listeners inside the sandbox, got %d", len(spec.Listen), len(sb.listeners))}
	}
	steps["setup"] = time.Since(t0)
	for k, v := range ready.Steps {
		steps["init."+k] = time.Duration(v)
	}
	sb.info.LandlockABI = ready.LandlockABI
	if sb.cg != nil && spec.Limits.Pids > 0 {
		n, err := threadsOf(sb.initPid)
		if err == nil {
			err = sb.cg.SetPids(spec.Limits.Pids + n + agentSparePids)
		}
		if err != nil {
			return nil, nil, &LayerError{Layer: layerCgroups, Err: fmt.Errorf("set the pids limit: %w", err)}
		}
	}
	sb.placeholders = ready.Placeholders
	if len(sb.placeholders) > 0 || sb.cg != nil || r.Detached {
		if err := writeState(stateDir, sb.state()); err != nil {
			return nil, nil, err
		}
	}
	if r.Reaper && !r.Detached {
		sb.startReaperLater(exe, exeEnv, reaperDelay)
	}
	go sb.readLoop()
	return sb, firstProc, nil
}

// buildSetup assembles the init's setup and, as root, the detached mounts
// that go with it (the caller closes them once sent).
func (sb *sandbox) buildSetup(spec *runtime.Spec, root string, pid int, owners *ownerNamespaces) (*setup, []*os.File, error) {
	st := &setup{
		StateDir: sb.stateDir, Image: spec.Image, Workspace: sb.workspace, Deny: spec.Deny, Hostname: "sandbox",
		Disk: orDefault(spec.Limits.Disk, defaultDisk), Tmp: orDefault(spec.Limits.Tmp, defaultTmp), Shm: orDefault(spec.Limits.Shm, defaultShm),
		NoFile: spec.Limits.NoFile, FileSize: spec.Limits.FileSize,
		Seccomp: spec.Seccomp, NoSeccomp: spec.Insecure.NoSeccomp, NoLandlock: spec.Insecure.NoLandlock,
		Listen: spec.Listen, WorkspaceTmpfs: sb.tempWorkspace && sb.workspace == "",
		ExecNotify: spec.RecordExec,
	}
	if !sb.tempWorkspace {
		st.WorkspaceLayer, st.WorkspaceVolatile = spec.WorkspaceLayer, spec.WorkspaceLayerVolatile && spec.WorkspaceLayer != ""
	}
	if !sb.tempWorkspace {
		st.Protected = spec.Protected
	}
	var err error
	if st.Mounts, err = bindMounts(spec); err != nil {
		return nil, nil, &LayerError{Layer: layerFilesystem, Err: err, Fix: "check that the path exists on the host"}
	}
	if spec.Image == "" {
		if st.Etc, err = etcCache(root); err != nil {
			return nil, nil, &LayerError{Layer: layerFilesystem, Err: err}
		}
	}
	if sb.info.Rootless {
		if spec.RootFrom != "" {
			return nil, nil, &LayerError{Layer: layerFilesystem, Err: errors.New("a root layer from a snapshot needs a root supervisor (idmapped mounts)")}
		}
		return st, nil, nil
	}
	t0 := time.Now()
	ns, err := owners.wait()
	if err != nil {
		return nil, nil, &LayerError{Layer: layerFilesystem, Err: err, Fix: "idmapped mounts of paths not owned by root need ptrace (kernel.yama.ptrace_scope below 3)"}
	}
	fds, names, err := idmappedMounts(pid, spec.Image, st.Etc, sb.workspace, st.WorkspaceLayer, st.Mounts, ns)
	if err != nil {
		return nil, nil, &LayerError{Layer: layerFilesystem, Err: err, Fix: "idmapped mounts need Linux >= 5.19 and a filesystem that supports them"}
	}
	if spec.RootFrom != "" {
		f, err := rootSnapMount(pid, spec.RootFrom)
		if err != nil {
			for _, f := range fds {
				f.Close()
			}
			return nil, nil, &LayerError{Layer: layerFilesystem, Err: err}
		}
		fds, names = append(fds, f), append(names, "rootsnap")
	}
	st.IDMapped = names
	sb.info.Steps["idmap"] = time.Since(t0)
	return st, fds, nil
}

// workspaceOwner is the host owner of a fresh workspace volume's root
// directory: root, so that it is attached idmapped like any root-owned
// workspace and appears owned by root inside. Ownership of what the
// runtime makes on host storage for a sandbox goes through here.
func workspaceOwner() (uid, gid int) { return 0, 0 }

// hostOwners lists the owners of the host paths a root supervisor
// attaches idmapped: the workspace and every bind source. Each appears as
// root inside (see idmappedMounts).
func hostOwners(spec *runtime.Spec, ws *unix.Stat_t) map[owner]bool {
	out := map[owner]bool{{ws.Uid, ws.Gid}: true}
	var srcs []string
	srcs = append(srcs, spec.ReadOnly...)
	srcs = append(srcs, spec.Writable...)
	for _, b := range spec.Binds {
		srcs = append(srcs, b.Source)
	}
	for _, p := range srcs {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			out[owner{st.Uid, st.Gid}] = true
		}
	}
	return out
}

// releaseLease gives a sandbox's host ids back once nothing of it can
// remain: called after its init is dead (with it, every process of its PID
// namespace); if its state directory could not be removed, the lease stays
// for the pool's reclaim, which checks again.
func releaseLease(lease *uidpool.Lease, stateDir string) {
	if lease == nil {
		return
	}
	if _, err := os.Lstat(stateDir); os.IsNotExist(err) {
		lease.Release()
	}
}

// initAttr starts the sandbox's init: this binary, re-executed in new
// user, mount, PID, network, IPC and UTS namespaces as root of the new user
// namespace, which maps ids 0 to n-1 inside to uid and gid and up on the
// host, with the control channel as fd 3 and /dev/null as stdio. As root
// the init starts with no supplementary groups; rootless it cannot drop
// them (setgroups is denied). Started by spawn.ForkExec (syscall.ForkExec's
// semantics, without copying this process's memory: a daemon's heap made
// that the slowest step of a creation) rather than os/exec: it needs no
// pidfd probe (a throwaway fork on first use) and hands back a pidfd, so
// the init can be signalled without racing pid reuse.
func initAttr(uid, gid, n int, rootless bool, control *os.File) *syscall.ProcAttr {
	null := devNull().Fd()
	return &syscall.ProcAttr{
		// One P is plenty for the agent, and fewer threads make the
		// all-threads syscalls of setup cheaper and leave the pids
		// limit to the sandbox's own processes.
		Env:   []string{"GOMAXPROCS=1"},
		Files: []uintptr{null, null, null, control.Fd()},
		Sys: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
				unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: n}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: n}},
			GidMappingsEnableSetgroups: !rootless,
			// Become root of the new user namespace (the host uid above).
			Credential: &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: rootless},
			Setsid:     true,
			Pdeathsig:  unix.SIGKILL,
			PidFD:      new(int),
		},
	}
}

// devNull is the stdio of every sandbox init, opened on first use.
var devNull = sync.OnceValue(func() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		panic(err)
	}
	return f
})

func (sb *sandbox) awaitReady(ctx context.Context) (*agent.Ready, error) {
	m, files, err := sb.recvOneFiles(ctx, setupTimeout)
	if err == nil && m.Type == agent.TypeReady && sb.recordExec {
		// The exec listener (Spec.RecordExec) comes last.
		if len(files) == 0 {
			return nil, &LayerError{Layer: layerRecord, Err: errors.New("the sandbox init sent no exec listener")}
		}
		sb.execListener = files[len(files)-1]
		files = files[:len(files)-1]
	}
	if err == nil && m.Type == agent.TypeReady && len(files) > 0 {
		// The listening sockets the init bound inside the sandbox's
		// network namespace (Spec.Listen), in order.
		for _, f := range files {
			l, lerr := net.FileListener(f)
			f.Close()
			if lerr != nil {
				sb.closeListeners()
				return nil, fmt.Errorf("listener from the sandbox: %w", lerr)
			}
			sb.listeners = append(sb.listeners, l)
		}
	} else {
		for _, f := range files {
			f.Close()
		}
	}
	if errors.Is(err, errRecvTimeout) {
		return nil, fmt.Errorf("sandbox init did not finish setup within %s", setupTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox init died during setup: %w", err)
	}
	switch m.Type {
	case agent.TypeReady:
		if m.Ready == nil {
			return nil, errors.New("sandbox init sent an empty ready message")
		}
		return m.Ready, nil
	case agent.TypeError:
		if m.Error == nil {
			return nil, errors.New("sandbox init failed without a reason")
		}
		return nil, &LayerError{Layer: m.Error.Layer, Err: errors.New(m.Error.Message), Fix: fixFor(m.Error.Layer)}
	default:
		return nil, fmt.Errorf("sandbox init sent %q during setup", m.Type)
	}
}

var errRecvTimeout = errors.New("no answer in time")

// recvOne reads one message before readLoop runs (setup, adoption), bounded
// by ctx and timeout; descriptors that come with it are closed.
func (sb *sandbox) recvOne(ctx context.Context, timeout time.Duration) (*agent.Message, error) {
	m, files, err := sb.recvOneFiles(ctx, timeout)
	for _, f := range files {
		f.Close()
	}
	return m, err
}

// recvOneFiles is recvOne keeping the descriptors that came with the
// message.
func (sb *sandbox) recvOneFiles(ctx context.Context, timeout time.Duration) (*agent.Message, []*os.File, error) {
	type result struct {
		m     *agent.Message
		files []*os.File
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		m, files, err := sb.conn.Recv()
		ch <- result{m, files, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case res := <-ch:
		return res.m, res.files, res.err
	case <-ctx.Done():
		go func() {
			if res := <-ch; res.files != nil {
				for _, f := range res.files {
					f.Close()
				}
			}
		}()
		return nil, nil, ctx.Err()
	case <-timer.C:
		go func() {
			if res := <-ch; res.files != nil {
				for _, f := range res.files {
					f.Close()
				}
			}
		}()
		return nil, nil, errRecvTimeout
	}
}

func fixFor(layer string) string {
	switch layer {
	case layerRecord:
		return "the activity record needs seccomp user notification (Linux >= 5.7); run without --record"
	case layerLandlock:
		return "enable Landlock in the kernel, or pass --insecure-no-landlock"
	case layerSeccomp:
		return "the kernel needs CONFIG_SECCOMP_FILTER; or pass --insecure-no-seccomp"
	case layerFilesystem:
		return "check the image, workspace and bind paths"
	case layerWorkspace:
		return "the overlay needs a kernel that mounts overlayfs in a user namespace (5.11+, idmapped layers 5.19+) and an upper layer on a filesystem with user extended attributes; or pass --workspace-mode live"
	case layerDisk:
		return "lower the sandbox's disk size, remove sandboxes or free space on the volume directory's filesystem; see airlock doctor"
	}
	return ""
}

// The agent (PID 1) is a Go program whose threads count against the pids
// limit. While it starts, the limit has room for agentStartupPids of them;
// once it is ready, the supervisor reads how many threads it has (from the
// host, not from the agent) and sets the limit to the user's number plus
// those plus agentSparePids, so that --pids N means N for the sandbox's own
// processes and threads, and a fork bomb cannot starve the agent of the
// threads it already runs with.
const (
	agentStartupPids = 32
	agentSparePids   = 4
)

func pidsLimit(pids int64) int64 {
	if pids <= 0 {
		return 0
	}
	return pids + agentStartupPids
}

// threadsOf counts the threads of a host process.
func threadsOf(pid int) (int64, error) {
	b, err := sysfile.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("no Threads line")
}

// ensureStateRoot creates the state root and refuses one that someone else
// could tamper with (in a shared /tmp, another user could have made it
// first, or made it a symlink).
func ensureStateRoot(root string) error {
	rundir.For(root)
	if err := os.MkdirAll(root, 0o711); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("state directory %s must be a directory owned by uid %d and writable only by it; remove it or set XDG_RUNTIME_DIR", root, os.Geteuid())
	}
	return nil
}

// isCgroup2 reports a pure cgroup v2 host (cgroup2 mounted at
// /sys/fs/cgroup), where the init can be cloned into its cgroup.
func isCgroup2() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

func orDefault(v, d int64) int64 {
	if v > 0 {
		return v
	}
	return d
}

// newID returns 16 random hex digits. getrandom(2) directly: crypto/rand
// would add the FIPS module's start-up work to every airlock process,
// sandbox inits included.
func newID() string {
	b := make([]byte, 8)
	for n := 0; n < len(b); {
		m, err := unix.Getrandom(b[n:], 0)
		if err != nil && err != unix.EINTR {
			panic("getrandom: " + err.Error())
		}
		n += max(m, 0)
	}
	return hex.EncodeToString(b)
}

// LayerError is a sandbox that could not be created because one isolation
// layer could not be applied.
type LayerError struct {
	Layer string
	Err   error
	Fix   string
}

func (e *LayerError) Error() string {
	msg := e.Layer + ": " + e.Err.Error()
	if e.Fix != "" {
		msg += " (fix: " + e.Fix + ")"
	}
	return msg
}

func (e *LayerError) Unwrap() error { return e.Err }

// cleanup is a rollback stack for multi-step setup.
type cleanup struct{ fns []func() }

func (c *cleanup) add(f func()) { c.fns = append(c.fns, f) }
func (c *cleanup) run() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
	c.fns = nil
}

// sandboxes share no state but the host; this lock only serialises sweeps.
var sweepMu sync.Mutex

// lastSweep is when this process last swept each state root (sweepMu).
var lastSweep = map[string]time.Time{}

// sweepEvery is the least time between two sweeps of a root by one
// process.
const sweepEvery = time.Second
