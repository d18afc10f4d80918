//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// Policy files: unknown keys are errors naming file and line; a valid
// policy's limits apply.
func TestPolicyFile(t *testing.T) {
	need(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("resources:\n  memory: 64MiB\n  bogus_key: 1\n"), 0o644)
	r := run(t, opts{}, []string{"--policy", bad}, "true")
	if r.code != 125 || !regexp.MustCompile(regexp.QuoteMeta(bad)+`:3`).MatchString(r.stderr) {
		t.Errorf("unknown key: want exit 125 and %s:3 in the message\n%s", bad, r)
	}
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("resources: {memory: 64MiB, pids: 64}\nenvironment:\n  set: {FROM_POLICY: \"yes\"}\n"), 0o644)
	r = run(t, opts{}, []string{"--policy", good}, "/bin/sh", "-c", "echo p=$FROM_POLICY")
	expect(t, kv(r.stdout), "p", "yes")
	if os.Geteuid() != 0 {
		return // the memory limit needs cgroups
	}
	r = run(t, opts{}, []string{"--policy", good}, "/usr/bin/python3", "-c", pyHog, "1024")
	if r.code != 137 {
		t.Errorf("1 GiB under a 64MiB policy: want exit 137\n%s", r)
	}
	r = run(t, opts{}, []string{"--policy", good}, "/usr/bin/python3", "-c", pyHog, "16")
	if r.code != 0 {
		t.Errorf("control: 16 MiB under a 64MiB policy\n%s", r)
	}
	// Flags override the policy.
	r = run(t, opts{}, []string{"--policy", good, "--memory", "512MiB"}, "/usr/bin/python3", "-c", pyHog, "128")
	if r.code != 0 {
		t.Errorf("--memory 512MiB over a 64MiB policy: 128 MiB should fit\n%s", r)
	}
}
