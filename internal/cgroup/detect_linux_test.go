package cgroup

import (
	"reflect"
	"testing"
)

const hybridMountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const pureV2Mountinfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`

const comountMountinfo = `25 24 0:22 / /sys/fs/cgroup/systemd rw,nosuid shared:5 - cgroup cgroup rw,xattr,name=systemd
26 24 0:23 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:6 - cgroup cgroup rw,cpu,cpuacct
27 24 0:24 /docker/abc /sys/fs/cgroup/memory rw,nosuid shared:7 - cgroup cgroup rw,memory
28 24 0:25 / /sys/fs/cgroup/unified rw,nosuid shared:8 - cgroup2 cgroup2 rw
`

func TestParseMountinfo(t *testing.T) {
	lo := parseMountinfo([]byte(hybridMountinfo))
	if lo.version() != V1 {
		t.Fatalf("hybrid: version %v, want v1", lo.version())
	}
	if got := lo.v1["memory"].point; got != "/sys/fs/cgroup/memory" {
		t.Errorf("memory mount %q", got)
	}
	if lo.v2 == nil || lo.v2.point != "/sys/fs/cgroup/unified" {
		t.Errorf("hybrid: cgroup2 mount %+v", lo.v2)
	}
	if want := []string{"cpu", "cpuacct", "freezer", "memory", "pids"}; !reflect.DeepEqual(lo.v1All, want) {
		t.Errorf("v1 controllers %v, want %v", lo.v1All, want)
	}

	lo = parseMountinfo([]byte(pureV2Mountinfo))
	if lo.version() != V2 || lo.v2.point != "/sys/fs/cgroup" || len(lo.v1) != 0 {
		t.Fatalf("pure v2: %v %+v %v", lo.version(), lo.v2, lo.v1)
	}

	lo = parseMountinfo([]byte(comountMountinfo))
	if lo.version() != V1 {
		t.Fatalf("comount: version %v", lo.version())
	}
	if lo.v1["cpu"] != lo.v1["cpuacct"] || lo.v1["cpu"].point != "/sys/fs/cgroup/cpu,cpuacct" {
		t.Errorf("cpu,cpuacct not co-mounted: %+v %+v", lo.v1["cpu"], lo.v1["cpuacct"])
	}
	// A sub-tree mount: the own cgroup /docker/abc/x lives at <mount>/x.
	d, err := hierDir(lo.v1["memory"], "/docker/abc/x")
	if err != nil || d != "/sys/fs/cgroup/memory/x" {
		t.Errorf("hierDir = %q, %v", d, err)
	}
	if _, err := hierDir(lo.v1["memory"], "/a/../../etc"); err == nil {
		t.Errorf("hierDir accepted ..")
	}
	// Only name=systemd on v1 and controllers on v2: v2.
	lo = parseMountinfo([]byte("25 24 0:22 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n28 24 0:25 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"))
	if lo.version() != V2 {
		t.Errorf("systemd-only v1: version %v, want v2", lo.version())
	}
	if v := parseMountinfo(nil).version(); v != 0 {
		t.Errorf("empty: version %v", v)
	}
}

func TestUnescapeAndOwn(t *testing.T) {
	if got := unescapeMount(`/a\040b\134c`); got != `/a b\c` {
		t.Errorf("unescape %q", got)
	}
	own, ok := ownCgroupV2([]byte("4:memory:/x\n0::/user.slice/app.scope\n"))
	if !ok || own != "/user.slice/app.scope" {
		t.Errorf("own %q %v", own, ok)
	}
}

func TestValidate(t *testing.T) {
	bad := []Limits{{Memory: -1}, {Swap: 1}, {Pids: -1}, {CPU: -1}, {CPU: 0.001}, {Memory: 1 << 62, Swap: 1 << 62}}
	for _, l := range bad {
		if l.Validate() == nil {
			t.Errorf("%+v accepted", l)
		}
	}
	if err := (Limits{Memory: 1 << 20, Pids: 10, CPU: 0.5}).Validate(); err != nil {
		t.Error(err)
	}
	if _, err := New("", "x", Limits{Memory: -1}); err == nil {
		t.Error("New accepted a negative memory limit")
	}
	for _, n := range []string{"", "a/../b", "a//b"} {
		if _, err := splitName(n); err == nil {
			t.Errorf("name %q accepted", n)
		}
	}
}

func TestDetect(t *testing.T) {
	info := Detect()
	t.Logf("Detect: %+v", info)
	if info.Version == 0 && info.Reason == "" {
		t.Error("no version and no reason")
	}
}
