// Package uidpool owns the host uid and gid ranges that sandboxes run as
// when airlock runs as root: which pool they come from (a configured one,
// root's subordinate ranges in /etc/subuid and /etc/subgid, or a built-in
// default), whether that pool is safe to use on this host, and (on Linux)
// the leases that give each sandbox a range of its own, host-wide, across
// `airlock run` processes and daemons alike.
//
// Every sandbox gets SlotSize uids and as many gids, so that ids 0-65535
// inside exist (nobody, 65534, included). Its user namespace is owned by
// the first uid of its range, so the kernel's per-user counters (inotify
// instances and watches, POSIX message queue bytes, pending signals,
// processes) are charged to that uid and no other sandbox's.
//
// It must never hand out a range that overlaps another live lease, a host
// account or another user's subordinate ids, and never reuse a range while
// anything of its previous sandbox may remain.
package uidpool

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SlotSize is how many uids (and gids) each sandbox gets.
const SlotSize = 65536

// maxID is one past the last usable id: (uid_t)-1 is not an id.
const maxID = 1<<32 - 1

// Default is the pool used when none is configured and root has no
// subordinate ranges: 2048 sandboxes' worth from 1879048192 (0x70000000),
// ids systemd documents as unused (above the container ranges of
// systemd-nspawn, below its foreign range and 2^31), and far above the
// ranges useradd delegates to users in /etc/subuid (from 100000 up).
var Default = Range{Start: 0x70000000, Size: 2048 * SlotSize}

// Range is the ids Start .. Start+Size-1.
type Range struct {
	Start int64 `json:"start" yaml:"start"`
	Size  int64 `json:"size" yaml:"size"`
}

// End is one past the last id of r.
func (r Range) End() int64 { return r.Start + r.Size }

func (r Range) overlaps(o Range) bool { return r.Start < o.End() && o.Start < r.End() }

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.Start, r.End()-1) }

// ParseRange reads START:SIZE (the form of /etc/subuid's last two fields).
func ParseRange(s string) (Range, error) {
	a, b, ok := strings.Cut(s, ":")
	start, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	size, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return Range{}, fmt.Errorf("uid pool %q: want START:SIZE, e.g. %d:%d", s, Default.Start, Default.Size)
	}
	r := Range{Start: start, Size: size}
	return r, r.check()
}

// check refuses a range that holds no sandbox, reaches into the 16-bit ids
// of the host's own users, or past the last valid id.
func (r Range) check() error {
	switch {
	case r.Size < SlotSize:
		// Named by START:SIZE: an empty range has no last id to print.
		return fmt.Errorf("uid pool %d:%d: size %d is below one sandbox's %d ids", r.Start, r.Size, r.Size, SlotSize)
	case r.Start < SlotSize:
		return fmt.Errorf("uid pool %s: must start at or above %d (ids below are the host's own users and nobody)", r, SlotSize)
	case r.End() > maxID:
		return fmt.Errorf("uid pool %s: ends past the last valid id %d", r, maxID-1)
	}
	return nil
}

// Pool is where sandboxes' uids and gids come from: slot i is uids
// UID.Start+i*SlotSize and gids GID.Start+i*SlotSize, SlotSize of each.
type Pool struct {
	UID, GID Range
	// Source says where the pool came from, for messages and the doctor.
	Source string
}

// Slots is how many sandboxes the pool holds at once.
func (p Pool) Slots() int { return int(min(p.UID.Size, p.GID.Size) / SlotSize) }

// Slot returns the first uid and gid of slot i.
func (p Pool) Slot(i int) (uid, gid int) {
	return int(p.UID.Start) + i*SlotSize, int(p.GID.Start) + i*SlotSize
}

func (p Pool) String() string {
	if p.UID == p.GID {
		return fmt.Sprintf("ids %s (%d sandboxes, %s)", p.UID, p.Slots(), p.Source)
	}
	return fmt.Sprintf("uids %s, gids %s (%d sandboxes, %s)", p.UID, p.GID, p.Slots(), p.Source)
}

// Sources of a pool.
const (
	SourceConfig  = "configured"
	SourceSubids  = "root's ranges in /etc/subuid and /etc/subgid"
	SourceDefault = "built-in default"
)

// Resolve returns the pool sandboxes take their ids from, checked against
// this host's accounts and subordinate ids: the configured range (uids and
// gids alike) when there is one, else root's entries in /etc/subuid and
// /etc/subgid, else Default.
func Resolve(configured *Range) (Pool, error) { return resolveIn("/etc", configured) }

func resolveIn(etc string, configured *Range) (Pool, error) {
	uidEntries, err := readSubids(filepath.Join(etc, "subuid"))
	if err != nil {
		return Pool{}, err
	}
	gidEntries, err := readSubids(filepath.Join(etc, "subgid"))
	if err != nil {
		return Pool{}, err
	}
	var p Pool
	switch rootU, rootG := rootRange(uidEntries), rootRange(gidEntries); {
	case configured != nil:
		if err := configured.check(); err != nil {
			return Pool{}, err
		}
		p = Pool{UID: *configured, GID: *configured, Source: SourceConfig}
	case rootU != nil && rootG != nil:
		p = Pool{UID: *rootU, GID: *rootG, Source: SourceSubids}
		if err := p.UID.check(); err != nil {
			return Pool{}, fmt.Errorf("root's range in %s: %w", filepath.Join(etc, "subuid"), err)
		}
		if err := p.GID.check(); err != nil {
			return Pool{}, fmt.Errorf("root's range in %s: %w", filepath.Join(etc, "subgid"), err)
		}
	case rootU != nil || rootG != nil:
		return Pool{}, fmt.Errorf("root has a subordinate range in only one of %s and %s: add the other, or configure a uid pool (--uid-pool, uid_pool)",
			filepath.Join(etc, "subuid"), filepath.Join(etc, "subgid"))
	default:
		p = Pool{UID: Default, GID: Default, Source: SourceDefault}
	}
	if err := checkHost(etc, p, uidEntries, gidEntries); err != nil {
		return Pool{}, err
	}
	return p, nil
}

// checkHost refuses a pool that shares ids with someone else on this host:
// an account in /etc/passwd or /etc/group (it could signal the sandbox's
// processes and would own its user namespace), or another user's
// subordinate range (their containers would run as the same ids).
func checkHost(etc string, p Pool, uidEntries, gidEntries []subid) error {
	fix := "configure a uid pool that does not overlap it (--uid-pool START:SIZE, uid_pool in the daemon's configuration)"
	for _, e := range uidEntries {
		if !isRoot(e.owner) && e.r.overlaps(p.UID) {
			return fmt.Errorf("uid pool %s (%s) overlaps %s's subordinate uids %s in %s: %s", p.UID, p.Source, e.owner, e.r, filepath.Join(etc, "subuid"), fix)
		}
	}
	for _, e := range gidEntries {
		if !isRoot(e.owner) && e.r.overlaps(p.GID) {
			return fmt.Errorf("gid pool %s (%s) overlaps %s's subordinate gids %s in %s: %s", p.GID, p.Source, e.owner, e.r, filepath.Join(etc, "subgid"), fix)
		}
	}
	for _, f := range []struct {
		file, what string
		r          Range
	}{{"passwd", "user", p.UID}, {"group", "group", p.GID}} {
		ids, err := readIDs(filepath.Join(etc, f.file))
		if err != nil {
			return err
		}
		for _, a := range ids {
			if a.id >= f.r.Start && a.id < f.r.End() {
				return fmt.Errorf("id pool %s (%s) holds %s %s (id %d in %s): %s", f.r, p.Source, f.what, a.name, a.id, filepath.Join(etc, f.file), fix)
			}
		}
	}
	return nil
}

// subid is one line of /etc/subuid or /etc/subgid.
type subid struct {
	owner string // a user name or a numeric uid
	r     Range
}

func isRoot(owner string) bool { return owner == "root" || owner == "0" }

// rootRange is root's first range large enough for a sandbox, or nil.
func rootRange(es []subid) *Range {
	for _, e := range es {
		if isRoot(e.owner) && e.r.Size >= SlotSize {
			return &e.r
		}
	}
	return nil
}

// readSubids reads a subordinate id file; a missing file has no entries.
func readSubids(path string) ([]subid, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out []subid
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		var start, size int64
		var err1, err2 error
		if len(f) == 3 {
			start, err1 = strconv.ParseInt(f[1], 10, 64)
			size, err2 = strconv.ParseInt(f[2], 10, 64)
		}
		if len(f) != 3 || err1 != nil || err2 != nil || start < 0 || size < 0 {
			return nil, fmt.Errorf("%s line %d: want NAME:START:COUNT, got %q", path, n, line)
		}
		out = append(out, subid{owner: f[0], r: Range{Start: start, Size: size}})
	}
	return out, sc.Err()
}

// account is a name and id from /etc/passwd or /etc/group.
type account struct {
	name string
	id   int64
}

// readIDs reads the names and ids (third field) of /etc/passwd or
// /etc/group; a missing file has none.
func readIDs(path string) ([]account, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out []account
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 || strings.HasPrefix(line, "#") {
			continue
		}
		if id, err := strconv.ParseInt(f[2], 10, 64); err == nil {
			out = append(out, account{f[0], id})
		}
	}
	return out, nil
}
