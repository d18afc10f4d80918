package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// struct seccomp_notif and struct seccomp_notif_resp (linux/seccomp.h).
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// The listener's ioctls, as golang.org/x/sys/unix names them:
// SECCOMP_IOCTL_NOTIF_RECV = _IOWR('!', 0, struct seccomp_notif) (80 bytes),
// SECCOMP_IOCTL_NOTIF_SEND = _IOWR('!', 1, struct seccomp_notif_resp) (24),
// SECCOMP_IOCTL_NOTIF_ID_VALID = _IOW('!', 2, __u64).
const (
	ioctlRecv    = unix.SECCOMP_IOCTL_NOTIF_RECV
	ioctlSend    = unix.SECCOMP_IOCTL_NOTIF_SEND
	ioctlIDValid = unix.SECCOMP_IOCTL_NOTIF_ID_VALID
)

var _ [80 - unsafe.Sizeof(seccompNotif{})]byte
var _ [24 - unsafe.Sizeof(seccompNotifResp{})]byte

// Limits on what is read of one exec's arguments.
const (
	maxArgs      = 4096
	maxArgvBytes = 256 << 10
	maxPathBytes = 4096
)

// Recorder writes one sandbox's record. Open it before the sandbox
// exists (it subscribes to the proc connector, and fails if it cannot),
// Start it with the exec listener once the sandbox is made and before the
// command runs, and Stop it once the sandbox is destroyed.
type Recorder struct {
	w    *Writer
	conn *Connector
	off  int64 // wall - monotonic, ns

	mu       sync.Mutex
	tr       *Tracker
	finished bool

	listener *os.File
	cgroups  []string
	started  bool
	stop     chan struct{}
	wakeR    int // read end of a pipe closed by Stop: wakes the polls at once
	wakeW    int
	wg       sync.WaitGroup
	notifEnd chan struct{}
	usageEnd chan struct{}
}

// Open subscribes to the proc connector; events go to w.
func Open(w io.Writer) (*Recorder, error) {
	c, err := OpenConnector()
	if err != nil {
		return nil, fmt.Errorf("proc connector: %w", err)
	}
	r := &Recorder{w: NewWriter(w), conn: c, stop: make(chan struct{}), notifEnd: make(chan struct{}), usageEnd: make(chan struct{})}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		c.Close()
		return nil, err
	}
	r.wakeR, r.wakeW = p[0], p[1]
	r.off = time.Now().UnixNano() - int64(mono())
	r.tr = NewTracker(r.w.Write, r.wall)
	return r, nil
}

func mono() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

func (r *Recorder) wall(m uint64) time.Time { return time.Unix(0, int64(m)+r.off).UTC() }

// Write writes an event of the caller's (start, net, end).
func (r *Recorder) Write(e *Event) { r.w.Write(e) }

// Err is the first error writing the record.
func (r *Recorder) Err() error { return r.w.Err() }

// Start follows the sandbox whose init is initPid: listener is its exec
// listener (the Recorder owns it from here), cgroups its cgroup
// directories, sampled every interval.
func (r *Recorder) Start(listener *os.File, initPid int, cgroups []string, interval time.Duration) {
	r.listener, r.cgroups, r.started = listener, cgroups, true
	r.mu.Lock()
	r.tr.Seed(initPid, mono())
	r.mu.Unlock()
	r.wg.Add(1)
	go r.connLoop()
	go r.notifLoop()
	go r.usageLoop(interval)
}

// Resume is Start for a sandbox that was already running under another
// supervisor (the daemon before a restart): the processes in its cgroups
// now are members too, their starts unknown.
func (r *Recorder) Resume(listener *os.File, initPid int, cgroups []string, interval time.Duration) {
	r.mu.Lock()
	for _, d := range cgroups {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || pid == initPid {
				continue
			}
			if st := readStatus(pid); st.nsPid > 0 {
				r.tr.Member(pid, st.nsPid)
			}
		}
	}
	r.mu.Unlock()
	r.Start(listener, initPid, cgroups, interval)
}

// drainLocked feeds every queued connector event to the tracker.
func (r *Recorder) drainLocked() {
	err := r.conn.drain(func(ev connEvent) {
		switch ev.what {
		case procEventFork:
			r.tr.Fork(ev.at, int(ev.b), int(ev.c), int(ev.d))
		case procEventExec:
			r.tr.Exec(ev.at, int(ev.b))
		case procEventExit:
			r.tr.Exit(ev.at, int(ev.a), int(ev.b), ev.c)
		}
	}, func() {
		r.tr.Loss(mono(), "the proc connector overflowed (ENOBUFS): fork, exec or exit events were dropped")
	})
	if err != nil {
		r.tr.Loss(mono(), "reading the proc connector failed: "+err.Error())
	}
}

func (r *Recorder) connLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		fds := []unix.PollFd{{Fd: int32(r.conn.fd), Events: unix.POLLIN}, {Fd: int32(r.wakeR), Events: unix.POLLIN}}
		unix.Poll(fds, -1)
		r.mu.Lock()
		if !r.finished {
			r.drainLocked()
		}
		r.mu.Unlock()
		// Batch: the connector reports every process event of the host,
		// and the socket's buffer holds tens of thousands; waking for
		// each one would cost more than reading them a few ms later.
		// (A notification drains the socket itself before it is read.)
		select {
		case <-r.stop:
			return
		case <-time.After(connBatch):
		}
	}
}

// connBatch is how long the connector's reader waits between drains.
const connBatch = 5 * time.Millisecond

// notifLoop answers every exec notification after recording it. It ends
// when the filter has no users left (the sandbox is gone) or on Stop.
func (r *Recorder) notifLoop() {
	defer close(r.notifEnd)
	// One thread waits and answers: no hand-off between threads per exec.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd := int(r.listener.Fd())
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(r.wakeR), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				return
			}
			continue
		}
		var n seccompNotif
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlRecv, uintptr(unsafe.Pointer(&n))); errno != 0 {
			if errno == unix.ENOENT || errno == unix.EINTR {
				continue
			}
			r.mu.Lock()
			if !r.finished {
				r.tr.Loss(mono(), "receiving exec notifications failed: "+errno.Error())
			}
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		finished := r.finished
		if !finished {
			r.drainLocked()
			r.tr.Notify(r.readCall(fd, &n))
		}
		r.mu.Unlock()
		if finished {
			// Never let a call go that is not in the record (a RECV that
			// returned after Stop or Detach gave up waiting).
			return
		}
		resp := seccompNotifResp{ID: n.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
		unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlSend, uintptr(unsafe.Pointer(&resp)))
	}
}

// readCall reads what the waiting caller of n asked for: path and argv
// from its memory, cwd and parent from /proc. Then it checks that the
// notification is still valid (the kernel's advice: the pid could have
// been reused by then) and takes the time before the caller is let go.
func (r *Recorder) readCall(listener int, n *seccompNotif) *Notification {
	tid := int(n.Pid)
	e := &Event{Type: TypeExec, Time: time.Now().UTC(), HostPid: tid}
	st := readStatus(tid)
	tgid := st.tgid
	if tgid == 0 {
		tgid = tid
	}
	e.HostPid = tgid
	e.Pid = st.nsPid
	if tgid != tid {
		e.Pid = readStatus(tgid).nsPid
	}
	e.HostPPid = st.ppid
	if st.ppid > 0 {
		pst := readStatus(st.ppid)
		if pst.levels == st.levels { // the parent is in the sandbox's pid namespace
			e.PPid = pst.nsPid
		}
	}
	e.Cwd = readlinkRaw("/proc/" + strconv.Itoa(tid) + "/cwd")

	var pathPtr, argvPtr uint64
	dirfd, flags := int32(unix.AT_FDCWD), uint64(0)
	if int(n.Nr) == unix.SYS_EXECVEAT {
		e.Syscall = "execveat"
		dirfd, pathPtr, argvPtr, flags = int32(n.Args[0]), n.Args[1], n.Args[2], n.Args[4]
	} else {
		e.Syscall = "execve"
		pathPtr, argvPtr = n.Args[0], n.Args[1]
	}
	memFD, err := unix.Open("/proc/"+strconv.Itoa(tid)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		mem := &memReader{f: rawMem(memFD), pages: map[uint64][]byte{}}
		e.Path, _, _ = mem.readString(pathPtr, maxPathBytes)
		e.Argv, e.ArgvTruncated = mem.readArgv(argvPtr)
		unix.Close(memFD)
	} else {
		e.ArgvTruncated = true
		e.Error = "reading the caller's memory: " + err.Error()
	}
	e.PathTarget = pathTarget(tid, e.Path, dirfd, flags)

	id := n.ID
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), ioctlIDValid, uintptr(unsafe.Pointer(&id))); errno != 0 {
		return &Notification{Tid: tid, Tgid: tgid, NoMatch: true}
	}
	return &Notification{At: mono(), Tid: tid, Tgid: tgid, Event: e}
}

// pathTarget names what an exec through a descriptor runs: execveat with
// AT_EMPTY_PATH (fexecve) or a relative path from a directory descriptor,
// and /proc/self/fd/N-style paths. Empty for an ordinary path.
func pathTarget(tid int, path string, dirfd int32, flags uint64) string {
	fdLink := func(fd string) string {
		return readlinkRaw(fmt.Sprintf("/proc/%d/fd/%s", tid, fd))
	}
	if path == "" && flags&unix.AT_EMPTY_PATH != 0 {
		return fdLink(strconv.Itoa(int(dirfd)))
	}
	if !strings.HasPrefix(path, "/") && dirfd != unix.AT_FDCWD {
		if d := fdLink(strconv.Itoa(int(dirfd))); d != "" {
			return filepath.Join(d, path)
		}
		return ""
	}
	for _, pre := range []string{"/proc/self/fd/", "/proc/thread-self/fd/", "/dev/fd/"} {
		if rest, ok := strings.CutPrefix(path, pre); ok {
			if _, err := strconv.Atoi(rest); err == nil {
				return fdLink(rest)
			}
		}
	}
	return ""
}

// memReader reads the caller's memory through /proc/PID/mem a page at a
// time, keeping the pages it read: argv's pointers and strings usually
// share one or two pages, so an exec costs a few reads, not one per
// argument.
type memReader struct {
	f interface {
		ReadAt([]byte, int64) (int, error)
	}
	pages map[uint64][]byte
}

const pageSize = 4096

func (m *memReader) page(base uint64) ([]byte, error) {
	if p, ok := m.pages[base]; ok {
		return p, nil
	}
	if len(m.pages) >= (maxArgvBytes+maxPathBytes)/pageSize+64 {
		return nil, errors.New("too many pages")
	}
	buf := make([]byte, pageSize)
	n, err := m.f.ReadAt(buf, int64(base))
	if n == 0 {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	m.pages[base] = buf[:n]
	return buf[:n], nil
}

// readString reads a NUL-terminated string at addr, at most max bytes
// (truncated reports a longer one).
func (m *memReader) readString(addr uint64, max int) (s string, truncated bool, err error) {
	if addr == 0 {
		return "", false, nil
	}
	var out []byte
	for len(out) < max {
		base := addr &^ (pageSize - 1)
		p, err := m.page(base)
		if err != nil {
			return string(out), true, err
		}
		off := int(addr - base)
		if off >= len(p) {
			return string(out), true, io.ErrUnexpectedEOF
		}
		chunk := p[off:]
		if len(chunk) > max-len(out) {
			chunk = chunk[:max-len(out)]
		}
		if i := bytes.IndexByte(chunk, 0); i >= 0 {
			return string(append(out, chunk[:i]...)), false, nil
		}
		out = append(out, chunk...)
		addr += uint64(len(chunk))
	}
	return string(out), true, nil
}

// readArgv reads a NULL-terminated array of string pointers.
func (m *memReader) readArgv(addr uint64) ([]string, bool) {
	if addr == 0 {
		return []string{}, false
	}
	argv := []string{}
	total := 0
	for i := 0; i < maxArgs; i++ {
		a := addr + uint64(8*i)
		base := a &^ (pageSize - 1)
		p, err := m.page(base)
		if err != nil || int(a-base)+8 > len(p) {
			return argv, true
		}
		ptr := binary.NativeEndian.Uint64(p[a-base:])
		if ptr == 0 {
			return argv, false
		}
		s, trunc, err := m.readString(ptr, maxArgvBytes-total)
		argv = append(argv, s)
		total += len(s)
		if trunc || err != nil {
			return argv, true
		}
	}
	return argv, true
}

// The per-exec reads use raw syscalls: os.File would register each
// /proc file with the runtime's poller (fcntl, epoll_ctl) for nothing.

func readFileRaw(path string, buf []byte) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if m <= 0 || err != nil {
			break
		}
		n += m
	}
	return n, nil
}

func readlinkRaw(path string) string {
	var buf [4096]byte
	n, err := unix.Readlink(path, buf[:])
	if err != nil || n < 0 {
		return ""
	}
	return string(buf[:n])
}

// rawMem is a caller's /proc/PID/mem opened without the runtime's poller.
type rawMem int

func (m rawMem) ReadAt(b []byte, off int64) (int, error) {
	n, err := unix.Pread(int(m), b, off)
	if n < 0 {
		n = 0
	}
	return n, err
}

type procStatus struct {
	tgid, ppid, nsPid, levels int
}

func readStatus(pid int) procStatus {
	var st procStatus
	var buf [4096]byte
	n, err := readFileRaw("/proc/"+strconv.Itoa(pid)+"/status", buf[:])
	if err != nil {
		return st
	}
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		switch k {
		case "Tgid":
			if len(f) > 0 {
				st.tgid, _ = strconv.Atoi(f[0])
			}
		case "PPid":
			if len(f) > 0 {
				st.ppid, _ = strconv.Atoi(f[0])
			}
		case "NSpid":
			st.levels = len(f)
			if len(f) > 0 {
				st.nsPid, _ = strconv.Atoi(f[len(f)-1])
			}
		}
	}
	return st
}

// Detach stops following a sandbox that goes on running (the daemon shuts
// down; the next one takes the listener over): no notification is
// answered from here on, the connector is drained, execs in flight are
// written as unconfirmed, and nothing else is settled. No end event.
func (r *Recorder) Detach() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	unix.Close(r.wakeW)
	defer unix.Close(r.wakeR)
	if r.started {
		r.wg.Wait()
		<-r.usageEnd
		select {
		case <-r.notifEnd:
			r.listener.Close()
		case <-time.After(2 * time.Second):
		}
	}
	r.mu.Lock()
	r.drainLocked()
	r.tr.Flush()
	r.finished = true
	r.mu.Unlock()
	r.conn.Close()
}

// Stop ends the record once the sandbox is destroyed (every process of it
// gone): it drains the connector, settles what is still open, and
// unsubscribes. It does not write the end event (the caller does).
func (r *Recorder) Stop() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	unix.Close(r.wakeW)
	defer unix.Close(r.wakeR)
	if r.started {
		r.wg.Wait()
		<-r.usageEnd
		select {
		case <-r.notifEnd:
			r.listener.Close()
		case <-time.After(2 * time.Second):
			// A RECV that blocked after its caller died: the goroutine
			// ends with the process; nothing more is recorded from it.
		}
	}
	r.mu.Lock()
	r.drainLocked()
	r.tr.Finish(mono())
	r.finished = true
	r.mu.Unlock()
	r.conn.Close()
}
