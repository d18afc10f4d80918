package native

// An idle service sandbox's agent sleeps (Sandbox.Sleep, agent.TypeSleep):
// a Go program of about 1 MiB of memory and seven threads gives its place
// as PID 1 to airlock-pid1's hold mode, one thread and a few pages, which
// waits for the supervisor's next message (or connection) and executes the
// agent again. The agent resumes with what it carried (ResumeMain): the
// largest process id, the kept output of finished processes, the same
// descriptors under the same numbers (the control channel, the listener
// for later supervisors, the root layer's).
//
// Both programs run from sealed memfds the supervisor made (Setup.Sleep):
// no path of the host is reachable from inside, and Landlock does not
// govern memfds. Everything the init applied to itself stays across both
// executions: its namespaces (the cgroup namespace of its main thread,
// which both calls are made from), seccomp filters, Landlock domain,
// no_new_privs, the empty capability sets and their locked secure bits,
// rlimits. What execve resets, each program sets again first: the
// process is not dumpable. Nothing else runs in the sandbox meanwhile (the
// agent sleeps only alone, and only it starts processes).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/initbin"
	"github.com/airlock-dev/airlock/internal/progfile"
)

// ResumeArg is the hidden subcommand of the agent executed again after a
// sleep.
const ResumeArg = "__sandbox-agent-resume"

// sleepEnv carries the descriptors across a sleep (sleepFDs, as JSON).
const sleepEnv = "AIRLOCK_AGENT_SLEEP"

// The init's copies of the two programs (Setup.Sleep); nil when it cannot
// sleep.
var sleeper, agentProgram *os.File

// sleepFDs are the descriptors an agent keeps across a sleep, -1 for none.
type sleepFDs struct {
	Conn     int `json:"conn"`
	Listener int `json:"listener"`
	Root     int `json:"root"`
	Sleeper  int `json:"sleeper"`
	Agent    int `json:"agent"`
	State    int `json:"state"` // a memfd holding the agent.SleepState
}

// sleepFunc returns the agent's Sleep for a sandbox whose init has both
// programs, nil otherwise.
func sleepFunc(listener *os.File) func(*agent.Conn, *agent.SleepState) error {
	if sleeper == nil || agentProgram == nil {
		return nil
	}
	return func(conn *agent.Conn, st *agent.SleepState) error {
		return sleep(conn, listener, st)
	}
}

// sleep executes the sleeper; it returns only on failure, with everything
// as it was.
func sleep(conn *agent.Conn, listener *os.File, st *agent.SleepState) error {
	stateFile, err := st.File()
	if err != nil {
		return fmt.Errorf("sleep: %w", err)
	}
	defer stateFile.Close() // reached only on failure
	fds := sleepFDs{Conn: int(conn.File().Fd()), Listener: -1, Root: -1, Sleeper: int(sleeper.Fd()), Agent: int(agentProgram.Fd()), State: int(stateFile.Fd())}
	if listener != nil {
		fds.Listener = int(listener.Fd())
	}
	if keptRoot > 0 {
		fds.Root = keptRoot
	}
	enc, _ := json.Marshal(fds)
	kept := []int{fds.Conn, fds.Listener, fds.Root, fds.Sleeper, fds.Agent, fds.State}
	for _, fd := range kept {
		if fd >= 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
				setCloexec(kept)
				return fmt.Errorf("sleep: %w", err)
			}
		}
	}
	argv := []string{"airlock-hold", "__hold", strconv.Itoa(fds.Agent), strconv.Itoa(fds.Conn)}
	if fds.Listener >= 0 {
		argv = append(argv, strconv.Itoa(fds.Listener))
	}
	argv = append(argv, "--", "airlock", ResumeArg)
	env := []string{sleepEnv + "=" + string(enc)}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, sleepEnv+"=") {
			env = append(env, e)
		}
	}
	err = unix.Exec(fmt.Sprintf("/proc/self/fd/%d", fds.Sleeper), argv, env)
	setCloexec(kept)
	return fmt.Errorf("sleep: execute the sleeper: %w", err)
}

func setCloexec(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}

// ResumeMain is the agent executed again by the sleeper: it takes back its
// descriptors and state and serves on. It never returns.
func ResumeMain() {
	// Dumpable again since the exec: first of all, not.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		os.Exit(121)
	}
	if unix.Gettid() != unix.Getpid() {
		fmt.Fprintln(os.Stderr, "airlock agent: not on the process's main thread, where Landlock's signal scope needs it")
		os.Exit(121)
	}
	var fds sleepFDs
	if err := json.Unmarshal([]byte(os.Getenv(sleepEnv)), &fds); err != nil || fds.Conn < 3 || fds.State < 3 || fds.Sleeper < 3 || fds.Agent < 3 {
		fmt.Fprintln(os.Stderr, "airlock agent: resumed without its descriptors:", os.Getenv(sleepEnv), err)
		os.Exit(121)
	}
	os.Unsetenv(sleepEnv)
	// Nothing may leak into the processes it starts (as InitMain).
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		os.Exit(121)
	}
	stateFile := os.NewFile(uintptr(fds.State), "state")
	st, err := agent.ReadSleepState(stateFile)
	stateFile.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock agent: resumed without its state:", err)
		os.Exit(121)
	}
	if err := unix.SetNonblock(fds.Conn, true); err != nil {
		os.Exit(121)
	}
	sleeper, agentProgram = os.NewFile(uintptr(fds.Sleeper), "sleeper"), os.NewFile(uintptr(fds.Agent), "agent")
	if fds.Root > 0 {
		keptRoot = fds.Root
	}
	var listener *os.File
	if fds.Listener >= 0 {
		listener = os.NewFile(uintptr(fds.Listener), "listener")
	}
	sigs := agent.CatchSignalsAsInit()
	srv := agent.NewServer(agent.NewConn(os.NewFile(uintptr(fds.Conn), "control")), listener)
	srv.Signals = sigs
	srv.Resume(st)
	srv.Sleep = sleepFunc(listener)
	srv.Serve()
	os.Exit(0)
}

// sleepPrograms are the sleeper (airlock-pid1) and the agent (airlock-init)
// in sealed memfds, made once per process and shared by every sandbox: an
// error when this build has no sleeper or the host refuses executable
// memfds (vm.memfd_noexec=2); its sandboxes then stay awake.
var sleepPrograms = sync.OnceValues(func() ([2]*os.File, error) {
	var progs [2]*os.File
	hold, agentBin := initbin.Pid1(), initbin.Bin()
	if len(hold) == 0 || len(agentBin) == 0 {
		return progs, errors.New("this build has no sleeper")
	}
	var err error
	if progs[0], err = progfile.Memfd("airlock-hold", hold); err != nil {
		return progs, err
	}
	if progs[1], err = progfile.Memfd("airlock-init", agentBin); err != nil {
		progs[0].Close()
		return progs, err
	}
	return progs, nil
})

// SleepAvailable says why this process's sandboxes cannot sleep, or nil.
func SleepAvailable() error {
	_, err := sleepPrograms()
	return err
}

// dupFile returns a close-on-exec copy of f (nil, harmless to Close, on
// failure).
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// Sleep asks the sandbox's agent to sleep. It fails with
// errdefs.ErrNotSupported for an agent older than the request, and with
// the agent's reason when it stays awake (something runs, or it was not
// given the programs: Runtime.Sleep, Spec.RecordExec).
func (sb *sandbox) Sleep(ctx context.Context) error {
	if sb.agentVersion < 6 {
		return fmt.Errorf("sleep: %w", errdefs.ErrNotSupported)
	}
	m, err := sb.call(ctx, func(seq uint64) *agent.Message {
		return &agent.Message{Type: agent.TypeSleep, Ack: &agent.Ack{Seq: seq}}
	})
	if err != nil {
		return err
	}
	if m.Type != agent.TypeAck || m.Ack == nil {
		return fmt.Errorf("sleep: unexpected answer %q", m.Type)
	}
	switch {
	case m.Ack.Error == "":
		return nil
	case strings.HasPrefix(m.Ack.Error, "busy"):
		return errors.New(m.Ack.Error) // asked again later
	default:
		return fmt.Errorf("sleep: %s: %w", m.Ack.Error, errdefs.ErrNotSupported)
	}
}
