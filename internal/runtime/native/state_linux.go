package native

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/quota"
	"github.com/airlock-dev/airlock/internal/sysfile"
)

// stateFile records, in a sandbox's state directory, what a later airlock
// must clean up if the supervisor that created the sandbox died (SIGKILL)
// before it could.
type stateFile struct {
	Owner        int      `json:"owner"`
	OwnerStart   string   `json:"owner_start"`
	Workspace    string   `json:"workspace"`
	Placeholders []string `json:"placeholders,omitempty"`
	Cgroups      []string `json:"cgroups,omitempty"`
	// Volume is the fresh workspace's volume on host storage.
	Volume *quota.Volume `json:"volume,omitempty"`

	// A detached sandbox outlives its owner: it is alive as long as its
	// init is, and a new supervisor may adopt it (Runtime.Adopt).
	Detached    bool   `json:"detached,omitempty"`
	Init        int    `json:"init,omitempty"`
	InitStart   string `json:"init_start,omitempty"`
	HostUID     int    `json:"host_uid,omitempty"`
	HostGID     int    `json:"host_gid,omitempty"`
	Rootless    bool   `json:"rootless,omitempty"`
	LandlockABI int    `json:"landlock_abi,omitempty"`
	TempWS      bool   `json:"temp_workspace,omitempty"`
	// Listen is the Spec's Listen: an adopting supervisor makes these
	// listening sockets again inside the sandbox (the previous
	// supervisor's died with it).
	Listen []string `json:"listen,omitempty"`
	// ExecListenerFD is the descriptor of the exec listener (Spec.RecordExec)
	// the init keeps: an adopting supervisor takes it with pidfd_getfd.
	ExecListenerFD int `json:"exec_listener_fd,omitempty"`
	// RootFD is the init's descriptor of its root layer (RootLayer).
	RootFD int `json:"root_fd,omitempty"`
}

// writeState records st, owned by this process, in the state directory.
func writeState(dir string, st *stateFile) error {
	st.Owner, st.OwnerStart = os.Getpid(), sysfile.SelfStart()
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".state.json.tmp")
	if err := sysfile.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "state.json"))
}

// sweep removes the state of sandboxes whose supervisor is gone. A
// directory without a state file is removed once it is old enough that no
// sandbox can still be starting in it. Then the volumes (vs, if any) of
// sandboxes without a state directory are removed.
//
// A process sweeps a root at most once per sweepEvery: a daemon creates
// many sandboxes a second, and each sweep reads the state of every
// sandbox in the root (with 500 sandboxes, 15% of the daemon's CPU while
// it made sandboxes). `airlock run` sweeps once, at its creation.
func sweep(root string, vs *quota.Volumes) {
	if !sweepMu.TryLock() {
		return
	}
	defer sweepMu.Unlock()
	if last, ok := lastSweep[root]; ok && time.Since(last) < sweepEvery {
		return
	}
	defer func() { lastSweep[root] = time.Now() }()
	if os.Geteuid() == 0 && cgroupSweepDue() {
		cgroup.Sweep("")
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !isID(e.Name()) {
			continue // the /etc cache, a daemon's own state root
		}
		dir := filepath.Join(root, e.Name())
		b, err := sysfile.ReadFile(filepath.Join(dir, "state.json"))
		if err != nil {
			fi, err := e.Info()
			if err == nil && time.Since(fi.ModTime()) > 2*setupTimeout {
				os.RemoveAll(dir)
			}
			continue
		}
		var st stateFile
		if json.Unmarshal(b, &st) != nil {
			continue
		}
		if st.Owner > 0 && sysfile.ProcStart(st.Owner) == st.OwnerStart {
			continue // owner alive
		}
		if st.Detached && st.Init > 0 && sysfile.ProcStart(st.Init) == st.InitStart {
			continue // outlives its owner by design, waiting to be adopted
		}
		cleanupState(dir, &st)
	}
	if vs != nil {
		// A sandbox's state directory exists before its volume and goes
		// after it.
		vs.Sweep(func(name string) bool {
			_, err := os.Lstat(filepath.Join(root, name))
			return !os.IsNotExist(err)
		})
	}
}

// cleanupState removes what a sandbox whose supervisor died left on the
// host: its placeholders in the workspace, its volume, its cgroup
// directories (its processes died with its init) and its state directory.
func cleanupState(dir string, st *stateFile) {
	removePlaceholders(st.Workspace, st.Placeholders)
	defer releaseIfGone(dir, st)
	if st.Volume != nil {
		st.Volume.Remove()
	}
	for _, cg := range st.Cgroups {
		if !strings.HasPrefix(cg, "/sys/fs/cgroup/") || strings.Contains(cg, "..") {
			continue
		}
		// The cgroup empties as the kernel finishes tearing down the
		// sandbox's processes; retry briefly while it is busy.
		for i := 0; i < 50; i++ {
			if err := os.Remove(cg); err == nil || os.IsNotExist(err) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	os.RemoveAll(dir)
}

// ReapArg is the hidden subcommand of the reaper: a small process that
// outlives a supervisor killed with SIGKILL and cleans up after it.
const ReapArg = "__sandbox-reap"

// ReapMain waits until the supervisor that started it is gone (the pipe on
// fd 3 reaches EOF), then cleans up the sandbox state directory named in
// its arguments if the supervisor could not. It never returns.
func ReapMain() {
	if len(os.Args) < 3 {
		os.Exit(2)
	}
	dir := os.Args[2]
	f := os.NewFile(3, "supervisor")
	buf := make([]byte, 1)
	for {
		if _, err := f.Read(buf); err != nil {
			break
		}
	}
	b, err := sysfile.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		os.Exit(0) // destroyed normally
	}
	var st stateFile
	if json.Unmarshal(b, &st) == nil {
		cleanupState(dir, &st)
	}
	os.Exit(0)
}

// startReaper starts the reaper for dir and returns the pipe end whose
// closing (by Destroy, or by the kernel when the supervisor dies) wakes it.
func startReaper(exe string, env []string, dir string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		w.Close()
		return nil, err
	}
	defer null.Close()
	p, err := os.StartProcess(exe, []string{"airlock", ReapArg, dir}, &os.ProcAttr{
		Env:   append([]string{}, env...),
		Files: []*os.File{null, null, null, r},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("start reaper: %w", err)
	}
	go p.Wait()
	return w, nil
}

// releaseIfGone gives back the host ids of a sandbox whose supervisor
// died, if nothing of it remains (see uidpool.Leases.ReleaseIfGone);
// otherwise the pool reclaims them later, once nothing does.
func releaseIfGone(dir string, st *stateFile) {
	if st.Rootless || st.HostGID == 0 {
		return
	}
	leases.ReleaseIfGone(st.HostUID, st.HostGID, filepath.Base(dir))
}

// cgroupSweepMarker's time is when an airlock of this host last swept
// the sandbox cgroups.
const cgroupSweepMarker = "/run/airlock/.cgroup-swept"

// cgroupSweepDue says whether this sweep should also sweep the sandbox
// cgroups: at most once per cgroup.SweepGrace on the host. The cgroup
// sweep reads every sandbox cgroup on the host, live ones included (with
// 500 of them it doubled the CPU time of an airlock run), and removes only
// cgroups older than that grace.
func cgroupSweepDue() bool {
	if fi, err := os.Stat(cgroupSweepMarker); err == nil && time.Since(fi.ModTime()) < cgroup.SweepGrace {
		return false
	}
	now := time.Now()
	if os.Chtimes(cgroupSweepMarker, now, now) != nil {
		if f, err := os.OpenFile(cgroupSweepMarker, os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600); err == nil {
			f.Close()
		}
	}
	return true
}
