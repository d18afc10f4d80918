package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A configuration with unknown keys or a wrong type is refused on one
// line that names each key and line, without the decoder's Go type
// names; a correct one loads (the control).
func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, err := LoadFile(write("unknown.yaml", "bogus: 1\nbogus2: 2\n"))
	if err == nil || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "daemon.Config") ||
		!strings.Contains(err.Error(), "line 1: unknown key bogus") || !strings.Contains(err.Error(), "line 2: unknown key bogus2") {
		t.Errorf("unknown keys: %v", err)
	}
	_, err = LoadFile(write("type.yaml", "socket: [a, b]\n"))
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("wrong type: %v", err)
	}
	c, err := LoadFile(write("ok.yaml", "socket: /tmp/x.sock\n"))
	if err != nil || c.Socket != "/tmp/x.sock" {
		t.Errorf("control: %+v %v", c, err)
	}
}

// A policy of the configuration that binds a directory of the host
// kernel's own filesystems writable is refused, naming the policy and the
// bind; read-only, and writable on an ordinary directory, it loads (the
// controls).
func TestConfigWritableKernelFS(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm"); err != nil {
		t.Skip("no /sys/kernel/mm here")
	}
	dir := t.TempDir()
	manager := func(bind string) error {
		pol := filepath.Join(dir, "p.yaml")
		if err := os.WriteFile(pol, []byte("filesystem:\n  binds:\n    - "+bind+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c := &Config{Socket: filepath.Join(dir, "s.sock"), DataDir: filepath.Join(dir, "data"), StateDir: filepath.Join(dir, "state"), Policies: map[string]string{"k": pol}}
		c.defaults()
		_, _, err := c.manager()
		return err
	}
	err := manager("{source: /sys/kernel/mm, target: /mnt/mm, mode: rw}")
	if err == nil || !strings.Contains(err.Error(), "config: policies.k: filesystem.binds[0].source /sys/kernel/mm is on the host kernel's sysfs filesystem") {
		t.Errorf("writable sysfs bind: %v", err)
	}
	for _, ok := range []string{"{source: /sys/kernel/mm, target: /mnt/mm}", "{source: " + dir + ", target: /mnt/d, mode: rw}"} {
		if err := manager(ok); err != nil && strings.Contains(err.Error(), "policies.k") {
			t.Errorf("control %s: %v", ok, err)
		}
	}
}

// sleep_after: a duration, "0" for never (-1 to the manager, which then
// never asks and gives the runtime no sleeper), unset for the manager's
// default; anything else is refused.
func TestConfigSleepAfter(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		v    string
		want time.Duration
		bad  bool
	}{{"", 0, false}, {"5s", 5 * time.Second, false}, {"0", -1, false}, {"0s", -1, false}, {"-1s", 0, true}, {"soon", 0, true}} {
		c := &Config{Socket: filepath.Join(dir, "s.sock"), DataDir: filepath.Join(dir, "data"), StateDir: filepath.Join(dir, "state"), SleepAfter: tc.v}
		c.defaults()
		mc, _, err := c.manager()
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "sleep_after") {
				t.Errorf("%q: %v, want an error naming sleep_after", tc.v, err)
			}
			continue
		}
		if err != nil || mc.SleepAfter != tc.want {
			t.Errorf("%q: %v %v, want %v", tc.v, mc.SleepAfter, err, tc.want)
		}
	}
}
