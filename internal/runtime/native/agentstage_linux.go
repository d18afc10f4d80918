package native

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/seccomp"
)

// agentStageArg, after InitArg, starts the second stage of a sandbox's
// init: the agent (see reexecAgent).
const agentStageArg = "agent"

// agentStage is what the first stage of the init hands to the second,
// in a memfd whose descriptor number is the last argument.
type agentStage struct {
	Ready      *agent.Ready         `json:"ready"`
	HandedOut  []int                `json:"handed_out,omitempty"`
	Listener   int                  `json:"listener"` // -1: none
	RW         []string             `json:"rw,omitempty"`
	NoLandlock bool                 `json:"no_landlock,omitempty"`
	ExecNotify bool                 `json:"exec_notify,omitempty"`
	Detached   bool                 `json:"detached,omitempty"`
	NoSeccomp  bool                 `json:"no_seccomp,omitempty"`
	Seccomp    []runtime.SockFilter `json:"seccomp,omitempty"`
	Exec       int64                `json:"exec"` // when the exec began, Unix ns
}

// reexecAgent ends the first stage of the init: with the namespaces, the
// root, the rlimits and the capabilities done, it executes the init
// program again (self, a descriptor opened before the root changed), as
// the same process, on the same thread: the cgroup namespace unshared on
// this thread, the credentials, the secure bits, no_new_privs and the
// rlimits carry over, and so do the descriptors it keeps (the control
// channel, the listeners, the root layer's), made inheritable here and
// close-on-exec again by the second stage before anything else. The second
// stage applies Landlock, the exec listener and seccomp (after the exec,
// so that neither has to admit it), sends the ready message and serves.
// What it leaves behind is the point: the setup's heap and the threads its
// blocking system calls left parked, about 0.4 MiB of every idle sandbox
// (docs/architecture.md). It returns only on failure.
func reexecAgent(self int, s *setup, ready *agent.Ready, listener *os.File) error {
	st := agentStage{
		Ready: ready, HandedOut: handedOut, Listener: -1,
		NoLandlock: s.NoLandlock, ExecNotify: s.ExecNotify, Detached: s.Detached,
		NoSeccomp: s.NoSeccomp, Seccomp: s.Seccomp,
	}
	for _, m := range s.Mounts {
		if m.Writable && m.Dir {
			st.RW = append(st.RW, m.Target)
		}
	}
	keep := append([]int{controlFD}, handedOut...)
	if listener != nil {
		st.Listener = int(listener.Fd())
		keep = append(keep, st.Listener)
	}
	if ready.RootFD > 0 {
		keep = append(keep, ready.RootFD)
	}
	st.Exec = time.Now().UnixNano()
	b, err := json.Marshal(&st)
	if err != nil {
		return err
	}
	fd, err := unix.MemfdCreate("airlock-agent-stage", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("agent stage: memfd: %w", err)
	}
	if _, err := unix.Write(fd, b); err != nil {
		return fmt.Errorf("agent stage: %w", err)
	}
	keep = append(keep, fd)
	for _, k := range keep {
		if _, err := unix.FcntlInt(uintptr(k), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("agent stage: keep descriptor %d: %w", k, err)
		}
	}
	argv := []string{os.Args[0], InitArg, agentStageArg, strconv.Itoa(fd)}
	err = execveat(self, argv, os.Environ())
	return fmt.Errorf("agent stage: execute the init program: %w", err)
}

// execveat executes the program open at fd (AT_EMPTY_PATH: no path is
// resolved, so it needs no /proc and reaches a file outside this root).
func execveat(fd int, argv, env []string) error {
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	empty := [1]byte{}
	_, _, errno := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(&empty[0])),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])), unix.AT_EMPTY_PATH, 0)
	return errno
}

// agentStageMain is the second stage of the init (see reexecAgent), with
// the stage's memfd at stageFD.
func agentStageMain(stageFD string) {
	// As in the first stage, the agent's request loop keeps this thread:
	// the processes it starts are forked from it, and its signals come
	// from it. That matters beyond the cgroup namespace (which every
	// thread of this image shares): Landlock is applied thread by thread,
	// each thread getting a domain of its own with the same rules, and a
	// domain that scopes signals refuses one sent to a process of another
	// domain. A signal sent from any other thread than the one that forked
	// the process is refused (measured: without this lock, 2 of 8 runs of
	// TestSignalReachesProcessGroup lost their SIGINT).
	goruntime.LockOSThread()
	// The exec made the process dumpable again; nothing in the sandbox
	// runs yet, and nothing may reach /proc/1 once something does.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		os.Exit(121)
	}
	if err := unix.CloseRange(controlFD, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		os.Exit(121)
	}
	if err := unix.SetNonblock(controlFD, true); err != nil {
		os.Exit(121)
	}
	conn := agent.NewConn(os.NewFile(controlFD, "control"))
	fd, err := strconv.Atoi(stageFD)
	if err != nil || fd <= controlFD {
		initFailed(conn, fmt.Errorf("agent stage: bad descriptor %q", stageFD))
	}
	var st agentStage
	f := os.NewFile(uintptr(fd), "agent-stage")
	err = json.NewDecoder(io.NewSectionReader(f, 0, 1<<24)).Decode(&st)
	f.Close()
	if err != nil || st.Ready == nil {
		initFailed(conn, fmt.Errorf("agent stage: read its state: %v", err))
	}
	ready := st.Ready
	if ready.Steps == nil {
		ready.Steps = map[string]int64{}
	}
	ready.Steps["agent.exec"] = time.Now().UnixNano() - st.Exec
	handedOut = st.HandedOut
	keptRoot = ready.RootFD
	var listener *os.File
	if st.Listener >= 0 {
		listener = os.NewFile(uintptr(st.Listener), "listener")
	}
	if err := hardenRest(&st); err != nil {
		if listener != nil {
			listener.Close()
		}
		initFailed(conn, err)
	}
	serveAgent(conn, ready, listener)
}

// hardenRest applies the layers after the capabilities: Landlock, the
// exec listener (Spec.RecordExec) and the policy's seccomp filter.
func hardenRest(st *agentStage) error {
	ready := st.Ready
	step := func(name string, t0 time.Time) { ready.Steps[name] = int64(time.Since(t0)) }
	if !st.NoLandlock {
		t0 := time.Now()
		abi, err := applyLandlock(st.RW)
		if err != nil {
			return inLayer(layerLandlock, err)
		}
		ready.LandlockABI = abi
		step("landlock", t0)
	}
	if st.ExecNotify {
		// Before the policy's filter (which may refuse seccomp(2) itself).
		// The listener goes to the supervisor with the ready message and
		// is closed here once sent; it is close-on-exec until then.
		t0 := time.Now()
		prog, err := seccomp.ExecNotifyFilter()
		if err == nil {
			var fd int
			if fd, err = seccomp.InstallListener(prog); err == nil {
				handedOut = append(handedOut, fd)
				if st.Detached {
					ready.ExecListenerFD = fd
				}
			}
		}
		if err != nil {
			return inLayer(layerRecord, err)
		}
		step("record", t0)
	}
	if !st.NoSeccomp {
		t0 := time.Now()
		if err := applySeccomp(st.Seccomp); err != nil {
			return inLayer(layerSeccomp, err)
		}
		step("seccomp", t0)
	}
	return nil
}
