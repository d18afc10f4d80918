//go:build linux

package native_test

import (
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/policy"
)

// TestMaskedDirsShareOneSuperblock: every directory a sandbox hides (the
// policy's denied directories, /proc's masked ones) is empty, mode 000 and
// read-only, and all of them are one tmpfs (one device number), not a
// tmpfs each. The controls: the sandbox's /tmp, on a tmpfs of its own, is
// another device and writable.
func TestMaskedDirsShareOneSuperblock(t *testing.T) {
	needRoot(t)
	denied := []string{"/etc/ssl", "/etc/apt", "/usr/share/doc", "/usr/include"}
	sb := newSandbox(t, &policy.Policy{Filesystem: policy.Filesystem{Deny: denied}})
	script := `
for d in ` + strings.Join(denied, " ") + ` /proc/acpi /proc/scsi /proc/asound /proc/firmware /proc/driver /proc/dynamic_debug; do
  [ -d "$d" ] || continue
  echo "dir $d $(stat -c '%d %a' "$d") $(ls -A "$d" 2>/dev/null | wc -l)"
  if touch "$d/x" 2>/dev/null; then echo "wrote $d"; fi
done
echo "tmp $(stat -c '%d' /tmp)"
touch /tmp/x && echo "tmp-writable"
`
	out, st := run(t, sb, "/bin/sh", "-c", script)
	if st.Code != 0 {
		t.Fatalf("probe: %+v\n%s", st, out)
	}
	devs := map[string]bool{}
	var tmpDev string
	n := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 5 && f[0] == "dir":
			n++
			devs[f[2]] = true
			if f[3] != "0" || f[4] != "0" {
				t.Errorf("%s: mode %s with %s entries, want an empty directory of mode 000", f[1], f[3], f[4])
			}
		case len(f) == 2 && f[0] == "wrote":
			t.Errorf("wrote into the hidden directory %s", f[1])
		case len(f) == 2 && f[0] == "tmp":
			tmpDev = f[1]
		}
	}
	if n < len(denied) {
		t.Fatalf("saw %d hidden directories, want at least the %d denied ones\n%s", n, len(denied), out)
	}
	if len(devs) != 1 {
		t.Errorf("the %d hidden directories are on %d devices (%v), want one tmpfs\n%s", n, len(devs), devs, out)
	}
	if tmpDev == "" || devs[tmpDev] || !strings.Contains(out, "tmp-writable") {
		t.Errorf("control: /tmp (device %q) should be a writable tmpfs of its own\n%s", tmpDev, out)
	}
}
