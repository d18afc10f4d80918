package uidpool

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// The test binary doubles as a lease holder in another process:
// UIDPOOL_TEST_HOLD=DIR:START:SLOTS:STATEDIR acquires a lease, prints
// "UID GID", and exits when stdin closes, releasing it only if
// UIDPOOL_TEST_RELEASE is set (otherwise it dies holding it, as a
// supervisor killed with SIGKILL would).
func TestMain(m *testing.M) {
	if spec := os.Getenv("UIDPOOL_TEST_HOLD"); spec != "" {
		os.Exit(hold(spec))
	}
	os.Exit(m.Run())
}

func hold(spec string) int {
	f := strings.SplitN(spec, ":", 4)
	start, _ := strconv.ParseInt(f[1], 10, 64)
	slots, _ := strconv.ParseInt(f[2], 10, 64)
	r := Range{start, slots * SlotSize}
	l := &Leases{Dir: f[0]}
	le, err := l.Acquire(Pool{UID: r, GID: r}, Owner{Sandbox: fmt.Sprintf("child-%d", os.Getpid()), StateDir: f[3]})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	if init := os.Getenv("UIDPOOL_TEST_INIT"); init != "" {
		pid, _ := strconv.Atoi(init)
		if err := le.SetInit(pid); err != nil {
			fmt.Println("ERR", err)
			return 1
		}
	}
	fmt.Println(le.UID, le.GID)
	io.Copy(io.Discard, os.Stdin)
	if os.Getenv("UIDPOOL_TEST_RELEASE") != "" {
		le.Release()
	}
	return 0
}

// holder is a lease held by another process.
type holder struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	uid, gid int
}

func startHolder(t *testing.T, dir string, start int64, slots int, stateDir string, env ...string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, fmt.Sprintf("UIDPOOL_TEST_HOLD=%s:%d:%d:%s", dir, start, slots, stateDir))...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, stdin: in}
	t.Cleanup(func() { h.stop() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if _, serr := fmt.Sscan(line, &h.uid, &h.gid); err != nil || serr != nil {
		t.Fatalf("holder: %q, %v", line, err)
	}
	return h
}

// stop ends the holder (which releases only if it was told to) and waits.
func (h *holder) stop() {
	h.stdin.Close()
	h.cmd.Wait()
}

func testLeases(t *testing.T) *Leases {
	return &Leases{Dir: filepath.Join(t.TempDir(), "uids")}
}

func pool(start int64, slots int) Pool {
	r := Range{start, int64(slots) * SlotSize}
	return Pool{UID: r, GID: r, Source: "test"}
}

// Processes acquiring at once from a pool with exactly one range each all
// get one, and no two the same; one more finds the pool exhausted while
// they hold theirs, and gets a range once one is released.
func TestAcquireConcurrentProcesses(t *testing.T) {
	l := testLeases(t)
	const n = 8
	const start = 200000
	hs := make(chan *holder, n)
	for i := 0; i < n; i++ {
		go func() { hs <- startHolder(t, l.Dir, start, n, "", "UIDPOOL_TEST_RELEASE=1") }()
	}
	var got []int
	var holders []*holder
	for i := 0; i < n; i++ {
		h := <-hs
		holders = append(holders, h)
		if h.uid != h.gid || (h.uid-start)%SlotSize != 0 || h.uid < start || h.uid >= start+n*SlotSize {
			t.Errorf("range %d/%d is not a slot of the pool", h.uid, h.gid)
		}
		got = append(got, h.uid)
	}
	sort.Ints(got)
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("two processes got the same range %d: %v", got[i], got)
		}
	}
	_, err := l.Acquire(pool(start, n), Owner{Sandbox: "late"})
	if !errors.Is(err, errdefs.ErrExhausted) {
		t.Fatalf("acquire from a full pool: %v, want ErrExhausted", err)
	}
	holders[3].stop() // releases
	le, err := l.Acquire(pool(start, n), Owner{Sandbox: "late"})
	if err != nil || le.UID != holders[3].uid {
		t.Fatalf("after a release: %+v, %v; want range %d", le, err, holders[3].uid)
	}
	if err := le.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.path(le.UID, le.GID)); !os.IsNotExist(err) {
		t.Errorf("lease file still there after Release: %v", err)
	}
}

// A lease whose holder died is reclaimed only once nothing of its sandbox
// can remain: not while its state directory exists, not while a process
// runs as one of its ids, not while its init lives; then it is.
func TestReclaimOnlyWhenGone(t *testing.T) {
	l := testLeases(t)
	const start = 300000
	p := pool(start, 1)
	stateDir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Its "init": a process the lease records, which outlives the holder.
	init := exec.Command("sleep", "60")
	if err := init.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { init.Process.Kill(); init.Wait() })
	h := startHolder(t, l.Dir, start, 1, stateDir, fmt.Sprintf("UIDPOOL_TEST_INIT=%d", init.Process.Pid))
	h.stop() // dies holding the lease

	exhausted := func(why string) {
		t.Helper()
		if le, err := l.Acquire(p, Owner{Sandbox: "next"}); !errors.Is(err, errdefs.ErrExhausted) {
			t.Fatalf("%s: the range was handed out again (%+v, %v)", why, le, err)
		}
	}
	exhausted("init alive")
	init.Process.Kill()
	init.Wait()
	exhausted("state directory present")
	os.Remove(stateDir)

	if os.Geteuid() == 0 {
		// A process running as one of the range's uids.
		user := exec.Command("sleep", "60")
		user.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(h.uid + 1000), Gid: uint32(h.gid + 1000)}}
		if err := user.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { user.Process.Kill(); user.Wait() })
		exhausted("a process runs as an id of the range")
		user.Process.Kill()
		user.Wait()
	}
	le, err := l.Acquire(p, Owner{Sandbox: "next"})
	if err != nil || le.UID != h.uid {
		t.Fatalf("nothing of the old sandbox remains: %+v, %v; want the range reclaimed", le, err)
	}
}

// ReleaseIfGone (cleanup after a dead supervisor) drops only the named
// sandbox's lease, and only when nothing of it remains.
func TestReleaseIfGone(t *testing.T) {
	l := testLeases(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	os.Mkdir(stateDir, 0o700)
	le, err := l.Acquire(pool(400000, 2), Owner{Sandbox: "a", StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	exists := func() bool { _, err := os.Stat(l.path(le.UID, le.GID)); return err == nil }
	l.ReleaseIfGone(le.UID, le.GID, "a")
	if !exists() {
		t.Fatal("released while the state directory exists")
	}
	os.Remove(stateDir)
	l.ReleaseIfGone(le.UID, le.GID, "b")
	if !exists() {
		t.Fatal("released for another sandbox")
	}
	l.ReleaseIfGone(le.UID, le.GID, "a")
	if exists() {
		t.Fatal("not released once nothing of the sandbox remains")
	}
}

// Claim (a daemon re-adopting) takes over its own sandbox's lease, refuses
// another sandbox's, and re-creates a missing one only where no other
// lease overlaps.
func TestClaim(t *testing.T) {
	l := testLeases(t)
	le, err := l.Acquire(pool(500000, 1), Owner{Sandbox: "a"})
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	got, err := l.Claim(le.UID, le.GID, Owner{Sandbox: "a"}, self)
	if err != nil || got.rec.Init != self {
		t.Fatalf("claim own lease: %+v, %v", got, err)
	}
	if _, err := l.Claim(le.UID, le.GID, Owner{Sandbox: "b"}, self); err == nil || !strings.Contains(err.Error(), "leased to sandbox a") {
		t.Errorf("claim another sandbox's lease: %v", err)
	}
	// Missing, but overlapping the lease at 500000 (uids or gids).
	if _, err := l.Claim(500000+SlotSize/2, 900000, Owner{Sandbox: "c"}, self); err == nil {
		t.Error("claimed a range whose uids overlap another lease")
	}
	if _, err := l.Claim(900000, 500000+1, Owner{Sandbox: "c"}, self); err == nil {
		t.Error("claimed a range whose gids overlap another lease")
	}
	c, err := l.Claim(1000000, 1000000, Owner{Sandbox: "c"}, self)
	if err != nil {
		t.Fatalf("claim a free range: %v", err)
	}
	if rec, err := l.read(1000000, 1000000); err != nil || rec.Sandbox != "c" || rec.Owner != self {
		t.Errorf("claimed lease: %+v, %v", rec, err)
	}
	c.Release()
}

// Leases taken from a differently aligned pool (another configuration)
// still exclude every range they overlap.
func TestUnalignedLeasesExclude(t *testing.T) {
	l := testLeases(t)
	a, err := l.Acquire(pool(100000, 1), Owner{Sandbox: "a"})
	if err != nil {
		t.Fatal(err)
	}
	// Slots 130000 (overlaps a) and 195536 (free).
	b, err := l.Acquire(pool(130000, 2), Owner{Sandbox: "b"})
	if err != nil || b.UID != 130000+SlotSize {
		t.Fatalf("acquire next to an unaligned lease: %+v, %v", b, err)
	}
	if _, err := l.Acquire(pool(130000, 2), Owner{Sandbox: "c"}); !errors.Is(err, errdefs.ErrExhausted) {
		t.Errorf("the slot overlapping %d was handed out: %v", a.UID, err)
	}
}

// A lease directory others could write to is refused.
func TestLeaseDirMustBePrivate(t *testing.T) {
	l := testLeases(t)
	if err := os.Mkdir(l.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(l.Dir, 0o777)
	if _, err := l.Acquire(pool(600000, 1), Owner{Sandbox: "a"}); err == nil || !strings.Contains(err.Error(), "writable only by it") {
		t.Errorf("acquire in a world-writable directory: %v", err)
	}
	os.Chmod(l.Dir, 0o700)
	if _, err := l.Acquire(pool(600000, 1), Owner{Sandbox: "a"}); err != nil {
		t.Errorf("control, private directory: %v", err)
	}
}

func TestProcessIn(t *testing.T) {
	self := int64(os.Getuid())
	if pid, ok := ProcessIn(Range{self, 1}, Range{1 << 31, 1}); !ok {
		t.Errorf("no process found with this test's uid %d", self)
	} else if pid <= 0 {
		t.Errorf("pid %d", pid)
	}
	if pid, ok := ProcessIn(Range{4000000000, 1}, Range{4000000000, 1}); ok {
		t.Errorf("process %d found in an unused range", pid)
	}
	if os.Geteuid() != 0 {
		return
	}
	// A zombie does not count (its parent, here this test, has not reaped
	// it yet); the same process alive does (the control).
	const id = 3999000000
	z := exec.Command("sh", "-c", "read x")
	z.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id, Gid: id}}
	in, _ := z.StdinPipe()
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
	defer z.Wait()
	r := Range{id, 1}
	if _, ok := ProcessIn(r, r); !ok {
		t.Error("a live process with the id was not found")
	}
	in.Close()
	for i := 0; i < 200; i++ { // until it is a zombie
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", z.Process.Pid))
		if strings.Contains(string(b), ") Z ") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pid, ok := ProcessIn(r, r); ok {
		t.Errorf("the zombie %d holds the range", pid)
	}
}
