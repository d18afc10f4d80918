package main

import "testing"

const sampleVerbose = `airlock: sandbox f838ca9dd8b85f81 (runtime native, root, root inside = host uid 100000)
airlock: layers: namespaces user,mnt,pid,net,ipc,uts,cgroup; Landlock ABI 7; seccomp on; cgroups /sys/fs/cgroup/memory/airlock/f8; capabilities dropped
airlock: created in 12.50ms: cgroups=7.39ms clone=1.34ms idmap=0.06ms init.capabilities=0.43ms init.landlock=0.24ms init.mounts=0.68ms init.mounts.binds=0.01ms init.mounts.dev=0.09ms init.namespaces=0.01ms init.seccomp=0.08ms setup=2.49ms
airlock: command started 1.89ms after the sandbox
airlock: destroyed in 1.42ms
`

func TestParseVerbose(t *testing.T) {
	got, err := parseVerbose(sampleVerbose)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"created": 12.50, "cgroups": 7.39, "clone": 1.34, "idmap": 0.06,
		"init.capabilities": 0.43, "init.landlock": 0.24, "init.mounts": 0.68,
		"init.mounts.binds": 0.01, "init.mounts.dev": 0.09, "init.namespaces": 0.01,
		"init.seccomp": 0.08, "setup": 2.49, "handshake": 1.89, "destroyed": 1.42,
	}
	if len(got) != len(want) {
		t.Errorf("got %d values %v, want %d", len(got), got, len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

func TestParseVerboseErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"airlock: command started 1.00ms after the sandbox\n", // no created line
		"airlock: created in 3.00ms: setup=1.00ms\n",          // no handshake
		"airlock: created in 3.00s: setup=1.00ms\nairlock: command started 1.00ms after the sandbox\n",
		"airlock: created in 3.00ms: setup=x\nairlock: command started 1.00ms after the sandbox\n",
		"airlock: created in 3.00ms: setup\nairlock: command started 1.00ms after the sandbox\n",
	} {
		if m, err := parseVerbose(in); err == nil {
			t.Errorf("parseVerbose(%q) = %v, want an error", in, m)
		}
	}
}

func TestUnattributed(t *testing.T) {
	got := unattributed(map[string]float64{
		"created": 10, "cgroups": 1, "clone": 2, "idmap": 0.5, "setup": 4,
		"init.mounts": 1.5, "init.mounts.dev": 1, "init.seccomp": 0.5,
		"handshake": 3, "destroyed": 2,
	})
	if got["created.unattributed"] != 2.5 || got["setup.unattributed"] != 2 || len(got) != 2 {
		t.Errorf("unattributed = %v, want created.unattributed=2.5 setup.unattributed=2", got)
	}
}
