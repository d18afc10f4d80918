package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// v1Wanted are the v1 controllers airlock joins, in this order.
var v1Wanted = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// v2Wanted are the v2 controllers airlock's limits use.
var v2Wanted = []string{"memory", "pids", "cpu"}

// mount is one cgroup mount from /proc/self/mountinfo.
type mount struct {
	point       string   // mount point
	root        string   // path inside the hierarchy that is mounted there
	v2          bool     // cgroup2
	controllers []string // v1 controllers (super options), nil for v2
}

// layout is the host's cgroup layout.
type layout struct {
	v2    *mount            // the cgroup2 mount, if any
	v1    map[string]*mount // v1 controller -> mount
	v1All []string          // every mounted v1 controller, sorted
}

// knownV1 are option names of v1 cgroup mounts that are controllers.
var knownV1 = map[string]bool{
	"cpu": true, "cpuacct": true, "cpuset": true, "memory": true,
	"devices": true, "freezer": true, "net_cls": true, "blkio": true,
	"perf_event": true, "net_prio": true, "hugetlb": true, "pids": true,
	"rdma": true, "misc": true,
}

// unescapeMount undoes the octal escapes (\040 etc.) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseMountinfo extracts the cgroup mounts from mountinfo text.
func parseMountinfo(data []byte) *layout {
	lo := &layout{v1: map[string]*mount{}}
	all := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" && i >= 6 {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+4 {
			continue
		}
		fstype := fields[sep+1]
		m := &mount{root: unescapeMount(fields[3]), point: unescapeMount(fields[4])}
		switch fstype {
		case "cgroup2":
			m.v2 = true
			// Prefer the conventional location; else the first one.
			if lo.v2 == nil || (m.point == "/sys/fs/cgroup" && lo.v2.point != "/sys/fs/cgroup") {
				lo.v2 = m
			}
		case "cgroup":
			for _, o := range strings.Split(fields[sep+3], ",") {
				if knownV1[o] {
					m.controllers = append(m.controllers, o)
				}
			}
			for _, c := range m.controllers {
				all[c] = true
				old := lo.v1[c]
				if old == nil || (!strings.HasPrefix(old.point, "/sys/fs/cgroup/") && strings.HasPrefix(m.point, "/sys/fs/cgroup/")) {
					lo.v1[c] = m
				}
			}
		}
	}
	for c := range all {
		lo.v1All = append(lo.v1All, c)
	}
	sort.Strings(lo.v1All)
	return lo
}

// version picks the hierarchy airlock uses: v1 when any of the limit
// controllers is bound to a v1 hierarchy (hybrid hosts), else v2 when
// cgroup2 is mounted.
func (lo *layout) version() Version {
	for _, c := range v2Wanted {
		if lo.v1[c] != nil {
			return V1
		}
	}
	if lo.v2 != nil {
		return V2
	}
	if len(lo.v1All) > 0 {
		return V1
	}
	return 0
}

func readLayout() (*layout, error) {
	layoutCache.Lock()
	defer layoutCache.Unlock()
	if layoutCache.lo != nil && time.Since(layoutCache.at) < layoutTTL {
		return layoutCache.lo, nil
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroup: read /proc/self/mountinfo: %w (is /proc mounted?)", err)
	}
	lo := parseMountinfo(data)
	layoutCache.lo, layoutCache.at = lo, time.Now()
	return lo, nil
}

// layoutTTL is how long a process reuses what it read of the cgroup
// mounts (a layout is never changed once parsed): a sandbox's cgroup and
// the sweep of dead ones that goes with it, or a daemon's creations within
// a second, read /proc/self/mountinfo once (for `airlock run`, about 0.18
// ms of CPU each time). A mount changed meanwhile fails the cgroup's
// creation (its files are not where the layout says), never weakens it.
const layoutTTL = time.Second

var layoutCache struct {
	sync.Mutex
	lo *layout
	at time.Time
}

// ownCgroupV2 returns the calling process's v2 cgroup path from
// /proc/self/cgroup ("0::/path").
func ownCgroupV2(data []byte) (string, bool) {
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest, true
		}
	}
	return "", false
}

// hierDir maps a cgroup path (relative to the hierarchy root) to a directory
// under mount m, honouring a mount of a sub-tree (m.root != "/").
func hierDir(m *mount, cgpath string) (string, error) {
	cgpath = "/" + strings.Trim(cgpath, "/")
	root := "/" + strings.Trim(m.root, "/")
	rel := cgpath
	if root != "/" {
		switch {
		case cgpath == root:
			rel = "/"
		case strings.HasPrefix(cgpath, root+"/"):
			rel = strings.TrimPrefix(cgpath, root)
		default:
			// With a cgroup namespace the paths are already relative to
			// the mount; use them as they are.
		}
	}
	if strings.Contains("/"+rel+"/", "/../") {
		return "", fmt.Errorf("cgroup: invalid cgroup path %q: must not contain ..", cgpath)
	}
	return filepath.Join(m.point, rel), nil
}

// writable reports whether dir accepts new cgroups (read-only mounts and
// missing permissions fail).
func writable(dir string) error {
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return &os.PathError{Op: "access", Path: dir, Err: err}
	}
	return nil
}

// v2Base resolves the v2 base directory for parent: the cgroup path parent
// under the mount, or for "" the mount root when writable, else the
// caller's own (delegated) cgroup.
func v2Base(m *mount, parent string) (string, error) {
	if parent != "" {
		return hierDir(m, parent)
	}
	if writable(m.point) == nil && writable(filepath.Join(m.point, "cgroup.subtree_control")) == nil {
		return m.point, nil
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("cgroup: %s is not writable and /proc/self/cgroup is unreadable: %w", m.point, err)
	}
	own, ok := ownCgroupV2(data)
	if !ok {
		return "", fmt.Errorf("cgroup: %s is not writable and /proc/self/cgroup has no v2 entry (0::)", m.point)
	}
	dir, err := hierDir(m, own)
	if err != nil {
		return "", err
	}
	if err := writable(dir); err != nil {
		return "", fmt.Errorf("cgroup: neither the root %s nor the own cgroup %s is writable (%v): run as root or in a delegated cgroup (systemd: Delegate=yes), or run with --insecure-no-cgroups", m.point, dir, err)
	}
	return dir, nil
}

// readControllers reads a v2 cgroup.controllers (or subtree_control) file.
func readControllers(file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(data)), nil
}

// Detect reports the cgroup support of this host. It changes nothing.
func Detect() Info {
	lo, err := readLayout()
	if err != nil {
		return Info{Reason: err.Error()}
	}
	return lo.detect()
}

func (lo *layout) detect() Info {
	var info Info
	info.Version = lo.version()
	switch info.Version {
	case 0:
		info.Reason = "no cgroup filesystem is mounted (neither cgroup2 nor cgroup v1 controllers in /proc/self/mountinfo): mount cgroup2 on /sys/fs/cgroup or run with --insecure-no-cgroups"
	case V2:
		info.Root = lo.v2.point
		base, err := v2Base(lo.v2, "")
		if err != nil {
			info.Reason = err.Error()
			cs, _ := readControllers(filepath.Join(lo.v2.point, "cgroup.controllers"))
			info.Controllers = cs
			return info
		}
		info.Writable = true
		cs, err := readControllers(filepath.Join(base, "cgroup.controllers"))
		if err != nil {
			info.Reason = fmt.Sprintf("cannot read %s: %v", filepath.Join(base, "cgroup.controllers"), err)
			return info
		}
		info.Controllers = cs
		var missing []string
		for _, c := range v2Wanted {
			if !contains(cs, c) {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			info.Reason = fmt.Sprintf("cgroup v2 controller(s) %s not available in %s/cgroup.controllers: enable them in the parent's cgroup.subtree_control or delegate them (systemd: Delegate=yes)", strings.Join(missing, ", "), base)
			return info
		}
		// A non-root cgroup (it has cgroup.type) with processes of its own
		// cannot enable controllers for its children (EBUSY).
		on, _ := readControllers(filepath.Join(base, "cgroup.subtree_control"))
		for _, c := range v2Wanted {
			if !contains(on, c) {
				missing = append(missing, c)
			}
		}
		procs, _ := os.ReadFile(filepath.Join(base, "cgroup.procs"))
		if len(missing) > 0 && len(bytes.TrimSpace(procs)) > 0 && exists(filepath.Join(base, "cgroup.type")) {
			info.Reason = fmt.Sprintf("cgroup v2: %s has processes of its own, so controller(s) %s cannot be enabled in its cgroup.subtree_control (no internal processes rule): move its processes into a leaf cgroup (e.g. %s/init) first", base, strings.Join(missing, ", "), base)
		}
	case V1:
		info.Controllers = lo.v1All
		var roots, missing, ro []string
		for _, c := range v1Wanted {
			m := lo.v1[c]
			if m == nil {
				missing = append(missing, c)
				continue
			}
			if !contains(roots, m.point) {
				roots = append(roots, m.point)
				if writable(m.point) != nil {
					ro = append(ro, m.point)
				}
			}
		}
		info.Root = strings.Join(roots, " ")
		info.Writable = len(roots) > 0 && len(ro) == 0
		var reasons []string
		if len(missing) > 0 {
			reasons = append(reasons, fmt.Sprintf("cgroup v1 controller(s) %s not mounted (expected under /sys/fs/cgroup/<controller>): mount them", strings.Join(missing, ", ")))
		}
		if len(ro) > 0 {
			reasons = append(reasons, fmt.Sprintf("not writable: %s (run as root with a writable /sys/fs/cgroup)", strings.Join(ro, " ")))
		}
		info.Reason = strings.Join(reasons, "; ")
	}
	return info
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
