package cgroup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/sysfile"
)

// ctlDir is one directory of a sandbox cgroup: the single directory on v2,
// one per distinct hierarchy on v1 (co-mounted controllers share one).
type ctlDir struct {
	controllers []string // v1 controllers of this hierarchy; nil on v2
	dir         string
	mnt         *mount // the hierarchy's mount (New on v1; nil after Open)
}

// Cgroup is the cgroup of one sandbox. Its methods may be called from
// several goroutines.
type Cgroup struct {
	version Version
	dirs    []ctlDir

	mu        sync.Mutex
	fd        int // v2: O_DIRECTORY fd of the cgroup, -1 when closed / v1
	destroyed bool
	oomKilled bool // remembered by Destroy
}

// How long Kill keeps trying and how long a freeze may take.
var (
	killTimeout   = 5 * time.Second
	freezeTimeout = 2 * time.Second
	v2KillFile    = "cgroup.kill" // tests change it to exercise the fallback
)

// New creates the cgroup name (e.g. "airlock/<id>") under parent, writes
// the limits l and returns it. parent is a cgroup path relative to the
// hierarchy root ("" = default: on v2 the root when writable, else the
// caller's own delegated cgroup; on v1 every controller mount). Every
// controller the limits need must be available, and on v1 the freezer too
// (for Kill); otherwise New fails with an error that says which one is
// missing and how to fix it. When New fails it leaves nothing behind.
func New(parent, name string, l Limits) (*Cgroup, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	parts, err := splitName(name)
	if err != nil {
		return nil, err
	}
	if parent != "" && strings.Contains("/"+parent+"/", "/../") {
		return nil, fmt.Errorf("cgroup: invalid parent %q: %w", parent, ErrBadParent)
	}
	lo, err := readLayout()
	if err != nil {
		return nil, err
	}
	switch lo.version() {
	case V2:
		base, err := v2Base(lo.v2, parent)
		if err != nil {
			return nil, err
		}
		return newV2(base, parts, l)
	case V1:
		return newV1(lo, parent, parts, l)
	}
	return nil, errors.New("cgroup: no cgroup filesystem is mounted (no cgroup2 and no v1 controllers in /proc/self/mountinfo): mount cgroup2 on /sys/fs/cgroup or run with --insecure-no-cgroups")
}

// splitName checks a relative cgroup name and splits it into components.
func splitName(name string) ([]string, error) {
	name = strings.Trim(name, "/")
	if name == "" {
		return nil, errors.New("cgroup: empty cgroup name: pass a name such as \"airlock/<id>\"")
	}
	parts := strings.Split(name, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, fmt.Errorf("cgroup: invalid cgroup name %q: components must not be empty, . or ..", name)
		}
	}
	return parts, nil
}

// created records directories New made, for the cleanup on failure.
type created struct{ dirs []string }

// undo removes what was created, newest first. Shared intermediate
// directories that are in use by someone else stay (rmdir fails EBUSY).
func (cr *created) undo() {
	for i := len(cr.dirs) - 1; i >= 0; i-- {
		_ = unix.Rmdir(cr.dirs[i])
	}
	cr.dirs = nil
}

// mkdir creates dir. Intermediate directories may exist (ok); the leaf
// must not.
func (cr *created) mkdir(dir string, leaf bool) error {
	err := unix.Mkdir(dir, 0o755)
	switch {
	case err == nil:
		cr.dirs = append(cr.dirs, dir)
		if leaf {
			// cgroupfs reports the time its inode was (re)loaded as
			// mtime unless one is set explicitly: stamp the creation
			// time, which Sweep's grace period relies on.
			now := time.Now()
			if err := os.Chtimes(dir, now, now); err != nil {
				return fmt.Errorf("cgroup: stamp creation time of %s: %w", dir, err)
			}
		}
		return nil
	case err == unix.EEXIST && !leaf:
		return nil
	case err == unix.EEXIST:
		return fmt.Errorf("cgroup: %s already exists: another sandbox uses this name, or it is a leftover of a dead sandbox (rmdir it once empty; Sweep removes old empty ones)", dir)
	}
	return fmt.Errorf("cgroup: create %s: %w", dir, err)
}

// retryRace runs create; on failure it removes what create made. A
// concurrent New that failed may remove a shared intermediate directory
// (e.g. "airlock") between our mkdirs, which shows as ENOENT: then the
// whole creation is tried again, a few times.
func retryRace(cr *created, create func() (*Cgroup, error)) (*Cgroup, error) {
	for attempt := 0; ; attempt++ {
		cg, err := create()
		if err == nil {
			return cg, nil
		}
		cr.undo()
		if attempt >= 2 || !errors.Is(err, unix.ENOENT) {
			return nil, err
		}
	}
}

// writeFile writes value to a cgroup control file in one write.
func writeFile(path, value string) error {
	if err := sysfile.Write(path, []byte(value)); err != nil {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Op == "open" {
			return fmt.Errorf("cgroup: open %s: %w", path, err)
		}
		return fmt.Errorf("cgroup: write %q to %s: %w", value, path, err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ---------------------------------------------------------------- v2

// newV2 creates <base>/<parts...> on a cgroup2 hierarchy, enabling the
// controllers the limits need in every parent's cgroup.subtree_control.
func newV2(base string, parts []string, l Limits) (*Cgroup, error) {
	if st, err := os.Stat(base); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("cgroup: v2 parent cgroup %s does not exist: create it or pass another parent: %v", base, err)
	}
	req := l.controllers()
	avail, err := readControllers(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup: read %s: %w (is %s a cgroup2 directory?)", filepath.Join(base, "cgroup.controllers"), err, base)
	}
	for _, c := range req {
		if !contains(avail, c) {
			return nil, fmt.Errorf("cgroup: %s controller not available in %s/cgroup.controllers (cgroup v2): enable it in the parent's cgroup.subtree_control (echo +%s > <parent>/cgroup.subtree_control) or delegate it (systemd: Delegate=yes), or run with --insecure-no-cgroups", c, base, c)
		}
	}
	var cr created
	cg, err := retryRace(&cr, func() (*Cgroup, error) {
		dir := base
		if err := enableV2(dir, req); err != nil {
			return nil, err
		}
		for i, p := range parts {
			dir = filepath.Join(dir, p)
			leaf := i == len(parts)-1
			if err := cr.mkdir(dir, leaf); err != nil {
				return nil, err
			}
			if !leaf {
				if err := enableV2(dir, req); err != nil {
					return nil, err
				}
			}
		}
		if err := applyV2(dir, l); err != nil {
			return nil, err
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("cgroup: open %s: %w", dir, err)
		}
		return &Cgroup{version: V2, dirs: []ctlDir{{dir: dir}}, fd: fd}, nil
	})
	return cg, err
}

// enableV2 enables the controllers cs in dir/cgroup.subtree_control.
func enableV2(dir string, cs []string) error {
	if len(cs) == 0 {
		return nil
	}
	file := filepath.Join(dir, "cgroup.subtree_control")
	on, err := readControllers(file)
	if err != nil {
		return fmt.Errorf("cgroup: read %s: %w", file, err)
	}
	for _, c := range cs {
		if contains(on, c) {
			continue
		}
		if err := writeFile(file, "+"+c); err != nil {
			switch {
			case errors.Is(err, unix.EBUSY):
				return fmt.Errorf("%w: %s has processes of its own and cgroup v2 forbids enabling controllers there (no internal processes): move them into a leaf cgroup (e.g. mkdir %s/init; echo <pid> > %s/init/cgroup.procs) or pass a parent without processes", err, dir, dir, dir)
			case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EINVAL):
				return fmt.Errorf("%w: the %s controller is not available in %s: enable it in the parent's cgroup.subtree_control or run with --insecure-no-cgroups", err, c, dir)
			}
			return err
		}
	}
	return nil
}

// applyV2 writes the limits into a v2 cgroup directory.
func applyV2(dir string, l Limits) error {
	if l.Memory > 0 {
		if err := writeFile(filepath.Join(dir, "memory.max"), strconv.FormatInt(l.Memory, 10)); err != nil {
			return err
		}
		swap := filepath.Join(dir, "memory.swap.max")
		if !exists(swap) {
			return fmt.Errorf("cgroup: swap accounting unavailable (%s missing) but a swap limit of %d bytes is required with the memory limit: enable it (kernel CONFIG_MEMCG_SWAP, boot option swapaccount=1) or run with --insecure-no-cgroups", swap, l.Swap)
		}
		if err := writeFile(swap, strconv.FormatInt(l.Swap, 10)); err != nil {
			return err
		}
	}
	if l.Pids > 0 {
		if err := writeFile(filepath.Join(dir, "pids.max"), strconv.FormatInt(l.Pids, 10)); err != nil {
			return err
		}
	}
	if l.CPU > 0 {
		v := fmt.Sprintf("%d %d", cpuQuota(l.CPU), CPUPeriod)
		if err := writeFile(filepath.Join(dir, "cpu.max"), v); err != nil {
			return err
		}
	}
	return nil
}

func cpuQuota(cores float64) int64 { return int64(math.Round(cores * CPUPeriod)) }

// ---------------------------------------------------------------- v1

// newV1 creates <mount>/<parent>/<parts...> in the memory, pids, cpu and
// freezer hierarchies. Controllers the limits need and the freezer are
// required; memory and pids are joined when mounted (for OOM reporting and
// accounting). cpu is joined only for a CPU limit: a task group of its own
// makes every sandbox start and teardown ~5 ms slower on v1 (measured with
// cmd/airlock-bench), for nothing when there is no quota to enforce.
func newV1(lo *layout, parent string, parts []string, l Limits) (*Cgroup, error) {
	required := append(l.controllers(), "freezer")
	if l.CPUAccounting {
		required = append(required, "cpuacct")
	}
	var dirs []ctlDir
	var bases []string
	byPoint := map[string]int{}
	for _, c := range v1Wanted {
		m := lo.v1[c]
		if (c == "cpu" || c == "cpuacct") && !contains(required, c) {
			continue
		}
		if m == nil {
			if contains(required, c) {
				why := "to enforce the " + c + " limit"
				if c == "freezer" {
					why = "to kill every sandbox process reliably"
				}
				return nil, fmt.Errorf("cgroup: %s controller not available (v1 mount /sys/fs/cgroup/%s missing from /proc/self/mountinfo; needed %s): mount/enable it or run with --insecure-no-cgroups", c, c, why)
			}
			continue
		}
		if i, ok := byPoint[m.point]; ok {
			dirs[i].controllers = append(dirs[i].controllers, c)
			continue
		}
		base, err := hierDir(m, "/"+strings.Trim(parent, "/"))
		if err != nil {
			return nil, err
		}
		if st, err := os.Stat(base); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("cgroup: v1 parent cgroup %s (%s controller) does not exist: create it or pass another parent: %v", base, c, err)
		}
		byPoint[m.point] = len(dirs)
		bases = append(bases, base)
		dirs = append(dirs, ctlDir{controllers: []string{c}, dir: filepath.Join(append([]string{base}, parts...)...), mnt: m})
	}
	var cr created
	return retryRace(&cr, func() (*Cgroup, error) {
		cg := &Cgroup{version: V1, dirs: dirs, fd: -1}
		for _, base := range bases {
			cur := base
			for i, p := range parts {
				cur = filepath.Join(cur, p)
				if err := cr.mkdir(cur, i == len(parts)-1); err != nil {
					return nil, err
				}
			}
		}
		if err := applyV1(cg, l); err != nil {
			return nil, err
		}
		return cg, nil
	})
}

// dirOf returns the directory of a v1 controller ("" if not joined) or
// the v2 directory.
func (c *Cgroup) dirOf(controller string) string {
	if c.version == V2 {
		return c.dirs[0].dir
	}
	for _, d := range c.dirs {
		if contains(d.controllers, controller) {
			return d.dir
		}
	}
	return ""
}

// applyV1 writes the limits into the v1 directories.
func applyV1(c *Cgroup, l Limits) error {
	if l.Memory > 0 {
		dir := c.dirOf("memory")
		if err := writeFile(filepath.Join(dir, "memory.limit_in_bytes"), strconv.FormatInt(l.Memory, 10)); err != nil {
			return err
		}
		memsw := filepath.Join(dir, "memory.memsw.limit_in_bytes")
		if !exists(memsw) {
			return fmt.Errorf("cgroup: swap accounting unavailable (%s missing) but a swap limit of %d bytes is required with the memory limit: boot with swapaccount=1 (kernel CONFIG_MEMCG_SWAP) or run with --insecure-no-cgroups", memsw, l.Swap)
		}
		if err := writeFile(memsw, strconv.FormatInt(l.Memory+l.Swap, 10)); err != nil {
			return err
		}
	}
	if l.Pids > 0 {
		if err := writeFile(filepath.Join(c.dirOf("pids"), "pids.max"), strconv.FormatInt(l.Pids, 10)); err != nil {
			return err
		}
	}
	if l.CPU > 0 {
		dir := c.dirOf("cpu")
		if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(CPUPeriod)); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.FormatInt(cpuQuota(l.CPU), 10)); err != nil {
			return err
		}
	}
	return nil
}

// ---------------------------------------------------------------- common

// Version reports the hierarchy version of the cgroup.
func (c *Cgroup) Version() Version { return c.version }

// Paths returns the cgroup's directories (one on v2, one per joined
// hierarchy on v1).
func (c *Cgroup) Paths() []string {
	out := make([]string, len(c.dirs))
	for i, d := range c.dirs {
		out[i] = d.dir
	}
	return out
}

// FD returns an O_DIRECTORY descriptor of the v2 cgroup directory for
// SysProcAttr.UseCgroupFD/CgroupFD (CLONE_INTO_CGROUP). The Cgroup owns it:
// do not close it; Destroy does. It reports false on v1 and after Destroy.
func (c *Cgroup) FD() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.version != V2 || c.fd < 0 {
		return -1, false
	}
	return c.fd, true
}

// Add moves pid (all its threads) into the cgroup, in every hierarchy on v1.
func (c *Cgroup) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup: invalid pid %d", pid)
	}
	for _, d := range c.dirs {
		if err := writeFile(filepath.Join(d.dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			if errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("%w (process %d does not exist)", err, pid)
			}
			return err
		}
	}
	return nil
}

// EnterThread moves the calling OS thread, and only it, into the cgroup in
// every v1 hierarchy, so that a process the thread then forks starts in
// the cgroup, and returns leave, which moves the thread back to where it
// was. Moving the current thread alone is not serialised against forks
// and exits of the whole system the way moving a process is (Add): on v1
// that costs an RCU grace period (about 10 ms) per move, this does not
// (on kernels that skip that lock for a thread moving itself; elsewhere it
// costs what Add does).
//
// The caller must hold the thread (runtime.LockOSThread) from before
// EnterThread until leave has returned. While the thread is inside, its
// process is listed as a member of the cgroup (and Kill or Freeze would
// reach it), so the caller must not let anything else use the cgroup
// before leave. If leave fails, the thread must not run anything else:
// the caller ends it (returns from the goroutine without UnlockOSThread)
// and waits for it to be gone (ThreadGone) before going on.
func (c *Cgroup) EnterThread() (leave func() error, err error) {
	if c.version != V1 {
		return nil, errors.New("cgroup: EnterThread is for v1 hierarchies (v2 clones into the cgroup)")
	}
	var from []string // where the thread is, per hierarchy
	cur, err := sysfile.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, err
	}
	for _, d := range c.dirs {
		if d.mnt == nil {
			return nil, fmt.Errorf("cgroup: %s: its mount is not known", d.dir)
		}
		path, ok := threadPath(string(cur), d.controllers[0])
		if !ok {
			return nil, fmt.Errorf("cgroup: this thread is in no %s cgroup", d.controllers[0])
		}
		dir, err := hierDir(d.mnt, path)
		if err != nil {
			return nil, err
		}
		from = append(from, dir)
	}
	moved := 0
	leave = func() error {
		var errs []error
		for i := moved - 1; i >= 0; i-- {
			if err := writeFile(filepath.Join(from[i], "tasks"), "0"); err != nil {
				errs = append(errs, err)
			}
		}
		moved = 0
		return errors.Join(errs...)
	}
	for _, d := range c.dirs {
		if err := writeFile(filepath.Join(d.dir, "tasks"), "0"); err != nil {
			if lerr := leave(); lerr != nil {
				return nil, fmt.Errorf("%w (and moving the thread back: %v): %w", err, lerr, ErrThreadStuck)
			}
			return nil, err
		}
		moved++
	}
	return leave, nil
}

// ErrThreadStuck says that EnterThread failed and could not move the
// thread back either: the caller must end the thread as for a failed leave.
var ErrThreadStuck = errors.New("the thread is left in the cgroup")

// ErrBadParent is a cgroup parent that would leave the cgroup tree. Its
// message says the fix.
var ErrBadParent = errors.New("a cgroup parent (--cgroup-parent, cgroup_parent) is a path inside the cgroup tree and must not contain ..")

// threadPath finds the cgroup path of the v1 hierarchy holding controller
// in the text of /proc/<pid>/cgroup ("id:controllers:path" lines).
func threadPath(text, controller string) (string, bool) {
	for _, line := range strings.Split(text, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && contains(strings.Split(f[1], ","), controller) {
			return f[2], true
		}
	}
	return "", false
}

// ThreadGone waits, up to timeout, until thread tid of this process has
// ended (see EnterThread), and reports whether it has.
func ThreadGone(tid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); errors.Is(err, os.ErrNotExist) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// ForkInThread runs fork on a locked OS thread that has moved alone into
// c (EnterThread), and moves the thread back right after, so that what
// fork starts is born in c without any process being moved (a move waits
// for an RCU grace period on v1). With c nil, fork runs on a locked thread
// that stays where it is. fork reports whether its thread may run other
// goroutines afterwards (false: it changed the thread, e.g. credentials it
// could not restore). A thread that cannot be moved back is never reused:
// its goroutine ends locked to it, and ForkInThread waits (10 s at most)
// for the thread to be gone, so that this process is no member of c when
// it returns. enterErr says the thread could not move in (fork did not
// run); leaveErr that it could not move back, or did not end then.
// Go starts new OS threads from a template thread while a goroutine is
// locked, never from this one, so nothing but fork runs on the thread
// while it is in c; and it is never the main thread, which Go does not end.
func ForkInThread(c *Cgroup, fork func() (reusable bool)) (enterErr, leaveErr error) {
	type result struct {
		enter, leave error
		tid          int
		stuck        bool // the thread is left in c and ends
	}
	ch := make(chan result, 1)
	var onThread func()
	onThread = func() {
		runtime.LockOSThread()
		tid := unix.Gettid()
		if tid == unix.Getpid() {
			// The main thread, which Go never ends: a thread that may
			// have to end cannot be this one. It stays locked here while
			// another goroutine, on another thread therefore, does it.
			done := make(chan struct{})
			go func() { defer close(done); onThread() }()
			<-done
			runtime.UnlockOSThread()
			return
		}
		leave := func() error { return nil }
		if c != nil {
			l, err := c.EnterThread()
			if err != nil {
				stuck := errors.Is(err, ErrThreadStuck)
				if !stuck {
					runtime.UnlockOSThread()
				}
				ch <- result{enter: err, tid: tid, stuck: stuck}
				return
			}
			leave = l
		}
		reusable := fork()
		lerr := leave()
		if reusable && lerr == nil {
			runtime.UnlockOSThread()
		}
		// else: the goroutine ends locked, and the thread with it.
		ch <- result{leave: lerr, tid: tid, stuck: lerr != nil}
	}
	go onThread()
	res := <-ch
	if res.stuck && !ThreadGone(res.tid, 10*time.Second) {
		return res.enter, fmt.Errorf("thread %d did not end after it failed to leave the sandbox's cgroup: %w", res.tid, errors.Join(res.enter, res.leave))
	}
	return res.enter, res.leave
}

// Procs lists the processes in the cgroup and its descendants (the union
// over the hierarchies on v1), sorted.
func (c *Cgroup) Procs() ([]int, error) {
	set := map[int]bool{}
	for _, d := range c.dirs {
		if err := procsTree(d.dir, set); err != nil {
			if errors.Is(err, os.ErrNotExist) && !exists(d.dir) {
				continue // removed (Destroy): nothing left in it
			}
			return nil, err
		}
	}
	out := make([]int, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Ints(out)
	return out, nil
}

// procsTree adds the pids of dir and its child cgroups to set.
func procsTree(dir string, set map[int]bool) error {
	data, err := sysfile.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return fmt.Errorf("cgroup: read %s: %w", filepath.Join(dir, "cgroup.procs"), err)
	}
	for _, f := range strings.Fields(string(data)) {
		if p, err := strconv.Atoi(f); err == nil {
			set[p] = true
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cgroup: list %s: %w", dir, err)
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := procsTree(filepath.Join(dir, e.Name()), set); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// Freeze stops every process in the cgroup and waits until they are frozen.
func (c *Cgroup) Freeze() error { return c.setFrozen(true, freezeTimeout) }

// Thaw lets the processes of a frozen cgroup run again.
func (c *Cgroup) Thaw() error { return c.setFrozen(false, freezeTimeout) }

// Frozen reports whether the cgroup is frozen or freezing (false when it
// cannot tell: no freezer).
func (c *Cgroup) Frozen() bool {
	if c.version == V2 {
		b, err := sysfile.ReadFile(filepath.Join(c.dirs[0].dir, "cgroup.freeze"))
		return err == nil && strings.TrimSpace(string(b)) == "1"
	}
	dir := c.dirOf("freezer")
	if dir == "" {
		return false
	}
	b, err := sysfile.ReadFile(filepath.Join(dir, "freezer.state"))
	st := strings.TrimSpace(string(b))
	return err == nil && (st == "FROZEN" || st == "FREEZING")
}

func (c *Cgroup) setFrozen(frozen bool, timeout time.Duration) error {
	var file, value, want string
	var done func() (bool, error)
	switch c.version {
	case V2:
		dir := c.dirs[0].dir
		file = filepath.Join(dir, "cgroup.freeze")
		value, want = "0", "frozen 0"
		if frozen {
			value, want = "1", "frozen 1"
		}
		events := filepath.Join(dir, "cgroup.events")
		done = func() (bool, error) {
			data, err := sysfile.ReadFile(events)
			if err != nil {
				return false, fmt.Errorf("cgroup: read %s: %w", events, err)
			}
			return strings.Contains(string(data), want), nil
		}
		if !exists(file) {
			return fmt.Errorf("cgroup: %s missing: the kernel has no cgroup v2 freezer (needs Linux 5.2+)", file)
		}
	default:
		dir := c.dirOf("freezer")
		if dir == "" {
			return errors.New("cgroup: freezer controller not joined (v1 mount /sys/fs/cgroup/freezer missing)")
		}
		file = filepath.Join(dir, "freezer.state")
		value = "THAWED"
		if frozen {
			value = "FROZEN"
		}
		done = func() (bool, error) {
			data, err := sysfile.ReadFile(file)
			if err != nil {
				return false, fmt.Errorf("cgroup: read %s: %w", file, err)
			}
			return strings.TrimSpace(string(data)) == value, nil
		}
	}
	if err := writeFile(file, value); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: %s did not reach %q within %v (a process may be stuck in the kernel)", file, value, timeout)
		}
		time.Sleep(delay)
	}
}

// Kill sends SIGKILL to every process in the cgroup. On v2 with
// cgroup.kill that is one write (the kernel kills descendants too, and
// processes that are forking); Destroy waits for them to be gone. Otherwise
// (v1) it freezes the cgroup, kills every listed pid, thaws, and repeats
// until the cgroup is empty, for at most a few seconds.
func (c *Cgroup) Kill() error {
	_, err := c.kill()
	return err
}

// kill is Kill; empty reports that it found the cgroup tree empty when it
// listed it last (v1), which spares Destroy listing it again.
func (c *Cgroup) kill() (empty bool, err error) {
	if c.version == V2 {
		kf := filepath.Join(c.dirs[0].dir, v2KillFile)
		if exists(kf) {
			return false, writeFile(kf, "1")
		}
	}
	deadline := time.Now().Add(killTimeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		pids, err := c.Procs()
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return false, nil // already removed
			}
			return false, err
		}
		if len(pids) == 0 {
			return true, nil
		}
		// A thread of the caller's inside (EnterThread) lists the caller:
		// never kill it.
		pids = slices.DeleteFunc(pids, func(p int) bool { return p == os.Getpid() })
		if len(pids) == 0 {
			return false, nil
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("cgroup: %d process(es) still in %s after %v of killing: %v", len(pids), c.dirs[0].dir, killTimeout, pids)
		}
		frozen := c.setFrozen(true, 500*time.Millisecond) == nil
		for _, p := range pids {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		// Killed frozen tasks die once thawed; always thaw, even after a
		// partial freeze.
		if err := c.setFrozen(false, 500*time.Millisecond); err != nil && frozen {
			return false, err
		}
		time.Sleep(delay)
	}
}

// populated reports whether any process is left in the cgroup tree.
func (c *Cgroup) populated() (bool, error) {
	pids, err := c.Procs()
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	return len(pids) > 0, nil
}

// Destroy kills every process, waits (bounded by ctx) until the cgroup is
// empty and removes its directories. Calling it again is a no-op. The OOM
// state is read before removal, so OOMKilled still works afterwards.
func (c *Cgroup) Destroy(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return nil
	}
	// The usual case: the sandbox's processes are gone (its init was
	// reaped, and the init of a PID namespace exits last), so rmdir alone
	// removes each directory. The kernel refuses it (EBUSY) while a
	// process or a child cgroup is left; what is left takes the careful
	// path below.
	c.oomKilled = c.readOOM()
	left := false
	for _, d := range c.dirs {
		if err := unix.Rmdir(d.dir); err != nil && err != unix.ENOENT {
			left = true
		}
	}
	if !left {
		c.closeDestroyed()
		return nil
	}
	empty, killErr := c.kill()
	for delay := time.Millisecond; !empty; delay = min(2*delay, 50*time.Millisecond) {
		busy, err := c.populated()
		if err != nil {
			return err
		}
		if !busy {
			break
		}
		if killErr != nil && c.version == V2 {
			return killErr
		}
		select {
		case <-ctx.Done():
			pids, _ := c.Procs()
			return fmt.Errorf("cgroup: destroy %s: processes %v still running: %w", c.dirs[0].dir, pids, ctx.Err())
		case <-time.After(delay):
		}
		if c.version == V2 {
			_ = c.Kill() // processes forked before the kill took effect
		}
	}
	c.oomKilled = c.oomKilled || c.readOOM()
	var errs []error
	for _, d := range c.dirs {
		if err := removeTree(ctx, d.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.closeDestroyed()
	return nil
}

// closeDestroyed marks c destroyed, its directories gone.
func (c *Cgroup) closeDestroyed() {
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
	c.destroyed = true
}

// removeTree removes a cgroup directory and its child cgroups, retrying
// while the kernel still reports it busy (exiting tasks), until ctx ends.
func removeTree(ctx context.Context, dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroup: list %s: %w", dir, err)
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeTree(ctx, filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := unix.Rmdir(dir)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.EBUSY {
			return fmt.Errorf("cgroup: remove %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroup: remove %s: %w (still busy: %v)", dir, err, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// OOMKilled reports whether the kernel OOM killer killed a process of the
// cgroup (v2 memory.events oom_kill; v1 memory.oom_control oom_kill, or
// under_oom on kernels without that counter). It is false when the memory
// controller is not joined.
func (c *Cgroup) OOMKilled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return c.oomKilled
	}
	return c.readOOM()
}

func (c *Cgroup) readOOM() bool {
	dir := c.dirOf("memory")
	if dir == "" {
		return false
	}
	file := "memory.events"
	if c.version == V1 {
		file = "memory.oom_control"
	}
	data, err := sysfile.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return false
	}
	kv := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				kv[f[0]] = n
			}
		}
	}
	if n, ok := kv["oom_kill"]; ok {
		return n > 0
	}
	return kv["under_oom"] > 0
}

// CheckParent makes a sandbox cgroup under parent (see New) with memory
// and pids limits, and removes it: a daemon configured with a parent checks
// at start that sandboxes can be made there (the parent exists in every
// hierarchy, with the controllers), rather than failing every creation.
func CheckParent(parent string) error {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	cg, err := New(parent, Prefix+"/check-"+hex.EncodeToString(b[:]), Limits{Memory: 64 << 20, Pids: 64})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cg.Destroy(ctx)
}

// ---------------------------------------------------------------- sweep

// Sweep removes sandbox cgroups under <parent base>/airlock (see Prefix;
// parent as for New) that are empty (no process in any hierarchy) and
// older than SweepGrace, so a sandbox that is starting is not touched. It
// returns how many sandbox cgroups it removed.
func Sweep(parent string) (int, error) {
	if parent != "" && strings.Contains("/"+parent+"/", "/../") {
		return 0, fmt.Errorf("cgroup: invalid parent %q: %w", parent, ErrBadParent)
	}
	lo, err := readLayout()
	if err != nil {
		return 0, err
	}
	var tops []string
	switch lo.version() {
	case V2:
		base, err := v2Base(lo.v2, parent)
		if err != nil {
			return 0, err
		}
		tops = []string{filepath.Join(base, Prefix)}
	case V1:
		seen := map[string]bool{}
		for _, c := range v1Wanted {
			m := lo.v1[c]
			if m == nil || seen[m.point] {
				continue
			}
			seen[m.point] = true
			base, err := hierDir(m, "/"+strings.Trim(parent, "/"))
			if err != nil {
				return 0, err
			}
			tops = append(tops, filepath.Join(base, Prefix))
		}
	default:
		return 0, nil
	}
	return sweepDirs(tops, SweepGrace, time.Now())
}

// sweepDirs removes every child name of the tops directories that is empty
// in all of them and whose directories are all older than grace.
func sweepDirs(tops []string, grace time.Duration, now time.Time) (int, error) {
	names := map[string]bool{}
	var errs []error
	for _, top := range tops {
		ents, err := os.ReadDir(top)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cgroup: sweep: list %s: %w", top, err))
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				names[e.Name()] = true
			}
		}
	}
	removed := 0
	for name := range names {
		keep := false
		var dirs []string
		for _, top := range tops {
			dir := filepath.Join(top, name)
			st, err := os.Stat(dir)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil || now.Sub(st.ModTime()) < grace {
				keep = true
				break
			}
			set := map[int]bool{}
			if err := procsTree(dir, set); err != nil || len(set) > 0 {
				keep = true
				break
			}
			dirs = append(dirs, dir)
		}
		if keep || len(dirs) == 0 {
			continue
		}
		ok := true
		for _, dir := range dirs {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := removeTree(ctx, dir)
			cancel()
			if err != nil {
				errs = append(errs, fmt.Errorf("cgroup: sweep: %w", err))
				ok = false
			}
		}
		if ok {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// SetPids changes the pids limit of a cgroup created with one (v1 and v2:
// pids.max). It fails for a cgroup that has no pids controller.
func (c *Cgroup) SetPids(n int64) error {
	if n <= 0 {
		return fmt.Errorf("cgroup: invalid pids limit %d: must be > 0", n)
	}
	dir := c.dirOf("pids")
	if dir == "" {
		return errors.New("cgroup: no pids controller in this cgroup")
	}
	return writeFile(filepath.Join(dir, "pids.max"), strconv.FormatInt(n, 10))
}

// Open returns the cgroup at paths, as Paths reported them for a cgroup New
// made: for a supervisor that adopts a sandbox another process created.
// Every path must be an existing cgroup directory of this host's layout.
func Open(paths []string) (*Cgroup, error) {
	if len(paths) == 0 {
		return nil, errors.New("cgroup: open: no paths")
	}
	lo, err := readLayout()
	if err != nil {
		return nil, err
	}
	within := func(p, root string) bool { return strings.HasPrefix(p, root+"/") }
	if lo.version() == V2 {
		if len(paths) != 1 || lo.v2 == nil || !within(paths[0], lo.v2.point) {
			return nil, fmt.Errorf("cgroup: open %v: not one directory of the cgroup2 mount", paths)
		}
		fd, err := unix.Open(paths[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("cgroup: open %s: %w", paths[0], err)
		}
		return &Cgroup{version: V2, dirs: []ctlDir{{dir: paths[0]}}, fd: fd}, nil
	}
	var dirs []ctlDir
	for _, p := range paths {
		var d ctlDir
		for _, c := range v1Wanted {
			if m := lo.v1[c]; m != nil && within(p, m.point) {
				d.controllers = append(d.controllers, c)
			}
		}
		if len(d.controllers) == 0 || strings.Contains(p, "/../") {
			return nil, fmt.Errorf("cgroup: open %s: not in a v1 hierarchy airlock uses", p)
		}
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("cgroup: open %s: %v", p, err)
		}
		d.dir = p
		dirs = append(dirs, d)
	}
	return &Cgroup{version: V1, dirs: dirs, fd: -1}, nil
}
