package uidpool

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/rundir"
	"github.com/airlock-dev/airlock/internal/sysfile"
)

// DefaultDir holds the leases of every airlock process on the host (`airlock
// run` and daemons alike, whatever their state directories), so that no two
// sandboxes ever share a range.
const DefaultDir = "/run/airlock/uids"

// Leases is a directory of leases, one file per leased range, named
// "UID-GID" (the first uid and gid of the range). Taking or dropping a
// lease holds an exclusive flock on the directory's lock file.
type Leases struct {
	Dir string
}

// Owner describes the sandbox a lease is for.
type Owner struct {
	// Sandbox is the runtime id.
	Sandbox string
	// StateDir is the sandbox's host state directory, where everything it
	// writes outside its own mount namespace lives; the range is never
	// reclaimed while it exists.
	StateDir string
}

// record is a lease file's content.
type record struct {
	UID        int    `json:"uid"`
	GID        int    `json:"gid"`
	Size       int    `json:"size"`
	Sandbox    string `json:"sandbox"`
	StateDir   string `json:"state_dir"`
	Owner      int    `json:"owner"`
	OwnerStart string `json:"owner_start"`
	Init       int    `json:"init,omitempty"`
	InitStart  string `json:"init_start,omitempty"`
}

// Lease is a range held by this process for one sandbox.
type Lease struct {
	UID, GID int
	l        *Leases
	rec      record
}

func (l *Leases) path(uid, gid int) string {
	return filepath.Join(l.Dir, fmt.Sprintf("%d-%d", uid, gid))
}

// Acquire leases a free range of p for o. Ranges are tried from a random
// slot on, so a range just released is unlikely to be handed out again at
// once. When every range is leased, leases whose holders are gone (see
// reclaimable) are reclaimed; if none is, the error wraps
// errdefs.ErrExhausted.
func (l *Leases) Acquire(p Pool, o Owner) (*Lease, error) {
	n := p.Slots()
	if n == 0 {
		return nil, fmt.Errorf("uid pool %s holds no sandbox", p)
	}
	unlock, err := l.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	for pass := 0; pass < 2; pass++ {
		held, err := l.held()
		if err != nil {
			return nil, err
		}
		if pass == 1 {
			// Every range is taken: reclaim those whose sandbox is gone.
			kept := held[:0]
			for _, h := range held {
				if rec, err := l.read(h.uid, h.gid); err == nil && h.overlapsPool(p) && reclaimable(rec) {
					os.Remove(l.path(h.uid, h.gid))
					continue
				}
				kept = append(kept, h)
			}
			held = kept
		}
		uidx, gidx := index(held, true), index(held, false)
		first := rand.IntN(n)
		for k := 0; k < n; k++ {
			uid, gid := p.Slot((first + k) % n)
			if uidx.overlaps(uid) || gidx.overlaps(gid) {
				continue
			}
			le := &Lease{UID: uid, GID: gid, l: l, rec: record{UID: uid, GID: gid, Size: SlotSize, Sandbox: o.Sandbox, StateDir: o.StateDir}}
			if err := le.write(); err != nil {
				return nil, err
			}
			return le, nil
		}
	}
	return nil, fmt.Errorf("uid pool %s: all %d ranges are leased to sandboxes that may still have processes or files (leases in %s): %w", p, n, l.Dir, errdefs.ErrExhausted)
}

// Claim takes over the lease of a sandbox made by another process (a
// daemon re-adopting its sandboxes after a restart): the lease for uid and
// gid must name o.Sandbox, or be missing with no other lease overlapping
// it. init is the sandbox's running init.
func (l *Leases) Claim(uid, gid int, o Owner, init int) (*Lease, error) {
	unlock, err := l.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := l.read(uid, gid)
	switch {
	case err == nil && rec.Sandbox != o.Sandbox:
		return nil, fmt.Errorf("host ids %d/%d are leased to sandbox %s, not %s (%s)", uid, gid, rec.Sandbox, o.Sandbox, l.path(uid, gid))
	case errors.Is(err, os.ErrNotExist):
		held, err := l.held()
		if err != nil {
			return nil, err
		}
		if index(held, true).overlaps(uid) || index(held, false).overlaps(gid) {
			return nil, fmt.Errorf("host ids %d/%d of sandbox %s overlap another sandbox's lease in %s", uid, gid, o.Sandbox, l.Dir)
		}
	case err != nil:
		return nil, err
	}
	le := &Lease{UID: uid, GID: gid, l: l, rec: record{UID: uid, GID: gid, Size: SlotSize, Sandbox: o.Sandbox, StateDir: o.StateDir}}
	le.rec.Init, le.rec.InitStart = init, sysfile.ProcStart(init)
	if err := le.write(); err != nil {
		return nil, err
	}
	return le, nil
}

// SetInit records the sandbox's init: while it lives, the range stays
// leased even when this process is gone (a daemon's detached sandboxes).
func (le *Lease) SetInit(pid int) error {
	le.rec.Init, le.rec.InitStart = pid, sysfile.ProcStart(pid)
	return le.write()
}

// Release drops the lease. The caller has seen every process of the
// sandbox end and its state directory go.
func (le *Lease) Release() error {
	unlock, err := le.l.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if rec, err := le.l.read(le.UID, le.GID); err == nil && rec.Sandbox != le.rec.Sandbox {
		return nil // not ours (any more)
	}
	if err := os.Remove(le.l.path(le.UID, le.GID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("release host ids %d/%d: %w", le.UID, le.GID, err)
	}
	return nil
}

// ReleaseIfGone drops the lease of sandbox on uid and gid if nothing of it
// remains: its state directory is gone and no process on the host runs
// with an id of its range. For cleaning up after a supervisor that died.
func (l *Leases) ReleaseIfGone(uid, gid int, sandbox string) {
	unlock, err := l.lock()
	if err != nil {
		return
	}
	defer unlock()
	rec, err := l.read(uid, gid)
	if err != nil || rec.Sandbox != sandbox {
		return
	}
	rec.Owner, rec.Init = 0, 0 // the caller knows they are gone
	if reclaimable(rec) {
		os.Remove(l.path(uid, gid))
	}
}

// LeaseInfo describes one lease, for the doctor.
type LeaseInfo struct {
	UID, GID int
	Sandbox  string
	// Held: its holder or the sandbox's init is alive.
	Held bool
}

// List returns the leases in the directory.
func (l *Leases) List() ([]LeaseInfo, error) {
	held, err := l.held()
	if err != nil {
		return nil, err
	}
	var out []LeaseInfo
	for _, h := range held {
		li := LeaseInfo{UID: h.uid, GID: h.gid}
		if rec, err := l.read(h.uid, h.gid); err == nil {
			li.Sandbox = rec.Sandbox
			li.Held = alive(rec.Owner, rec.OwnerStart) || alive(rec.Init, rec.InitStart)
		}
		out = append(out, li)
	}
	return out, nil
}

// reclaimable reports whether a lease's range may be handed out again:
// its holder and the sandbox's init are gone, its state directory is gone,
// and no process on the host runs with a uid or gid of the range. An
// unreadable lease is never reclaimed.
func reclaimable(rec record) bool {
	if alive(rec.Owner, rec.OwnerStart) || alive(rec.Init, rec.InitStart) {
		return false
	}
	if rec.StateDir != "" {
		if _, err := os.Lstat(rec.StateDir); !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	size := max(rec.Size, SlotSize)
	_, used := ProcessIn(Range{int64(rec.UID), int64(size)}, Range{int64(rec.GID), int64(size)})
	return !used
}

// ProcessIn returns a process on the host (by /proc) whose real,
// effective, saved or filesystem uid lies in uids, or gid in gids.
// Zombies do not count: a dead process holds no file and runs nothing,
// and one whose parent is slow to reap it (an init that reaps now and
// then) must not hold a range forever.
func ProcessIn(uids, gids Range) (pid int, found bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, true // cannot tell: assume the worst
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := sysfile.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue // gone
		}
		for _, line := range strings.Split(string(b), "\n") {
			var r Range
			var rest string
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				if st := strings.TrimSpace(v); strings.HasPrefix(st, "Z") || strings.HasPrefix(st, "X") {
					break // a zombie, or dead
				}
				continue
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				r, rest = uids, v
			} else if v, ok := strings.CutPrefix(line, "Gid:"); ok {
				r, rest = gids, v
			} else {
				continue
			}
			for _, f := range strings.Fields(rest) {
				if id, err := strconv.ParseInt(f, 10, 64); err == nil && id >= r.Start && id < r.End() {
					return pid, true
				}
			}
		}
	}
	return 0, false
}

// write records the lease (atomically: a reader never sees half a file).
func (le *Lease) write() error {
	le.rec.Owner, le.rec.OwnerStart = os.Getpid(), sysfile.SelfStart()
	b, err := json.Marshal(le.rec)
	if err != nil {
		return err
	}
	final := le.l.path(le.UID, le.GID)
	tmp := filepath.Join(le.l.Dir, fmt.Sprintf(".%d-%d.tmp", le.UID, le.GID))
	if err := sysfile.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("uid lease: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("uid lease: %w", err)
	}
	return nil
}

func (l *Leases) read(uid, gid int) (record, error) {
	var rec record
	b, err := sysfile.ReadFile(l.path(uid, gid))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("lease %s: %w", l.path(uid, gid), err)
	}
	return rec, nil
}

// heldRange is a lease by its name.
type heldRange struct{ uid, gid int }

func (h heldRange) overlapsPool(p Pool) bool {
	return Range{int64(h.uid), SlotSize}.overlaps(p.UID) || Range{int64(h.gid), SlotSize}.overlaps(p.GID)
}

// held lists the leased ranges by the names of the lease files.
func (l *Leases) held() ([]heldRange, error) {
	entries, err := os.ReadDir(l.Dir)
	if err != nil {
		return nil, fmt.Errorf("uid leases: %w", err)
	}
	var out []heldRange
	for _, e := range entries {
		a, b, ok := strings.Cut(e.Name(), "-")
		uid, err1 := strconv.Atoi(a)
		gid, err2 := strconv.Atoi(b)
		if ok && err1 == nil && err2 == nil {
			out = append(out, heldRange{uid, gid})
		}
	}
	return out, nil
}

// starts is the sorted first ids of leased ranges, each SlotSize long.
type starts []int

func index(held []heldRange, uids bool) starts {
	s := make(starts, 0, len(held))
	for _, h := range held {
		if uids {
			s = append(s, h.uid)
		} else {
			s = append(s, h.gid)
		}
	}
	sort.Ints(s)
	return s
}

// overlaps reports whether the range of SlotSize ids from id overlaps a
// leased one: some start lies in (id-SlotSize, id+SlotSize).
func (s starts) overlaps(id int) bool {
	i := sort.SearchInts(s, id-SlotSize+1)
	return i < len(s) && s[i] < id+SlotSize
}

// lock takes the directory's lock, creating the directory (mode 0700) if
// needed and refusing one that others could write to.
func (l *Leases) lock() (func(), error) {
	rundir.For(l.Dir)
	if err := os.MkdirAll(filepath.Dir(l.Dir), 0o711); err != nil {
		return nil, fmt.Errorf("uid leases: %w", err)
	}
	if err := os.Mkdir(l.Dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("uid leases: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(l.Dir, &st); err != nil {
		return nil, fmt.Errorf("uid leases: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return nil, fmt.Errorf("uid leases: %s must be a directory owned by uid %d and writable only by it", l.Dir, os.Geteuid())
	}
	fd, err := unix.Open(filepath.Join(l.Dir, ".lock"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("uid leases: %w", err)
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("uid leases: lock: %w", err)
	}
	return func() { unix.Close(fd) }, nil
}

// alive reports whether pid is still the process that started at start.
func alive(pid int, start string) bool {
	return pid > 0 && start != "" && sysfile.ProcStart(pid) == start
}
