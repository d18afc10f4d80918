//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// C4: the host user's credential directories do not exist inside; the same
// files made visible on purpose (--ro) are readable (positive control).
func TestC4CredentialFiles(t *testing.T) {
	needRoot(t)
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		t.Skip("no home directory")
	}
	tag := randHex(4)
	secret := randHex(16)
	var planted []string
	for _, d := range []string{".ssh", ".aws", ".kube", ".docker"} {
		p := filepath.Join(home, d, "airlock-e2e-"+tag)
		plantCanary(t, p, secret)
		planted = append(planted, p)
	}
	script := `
for d in .ssh .aws .kube .docker; do
  for base in /root /home/root "$HOME"; do test -e "$base/$d/airlock-e2e-$T" && echo "found=$base/$d"; done
done
find / -xdev -name "airlock-e2e-$T" 2>/dev/null | sed 's/^/found=/'
echo home=$HOME
echo done=1`
	r := run(t, opts{}, []string{"--env", "T=" + tag}, "/bin/sh", "-c", script)
	mustOK(t, r, "probe")
	if strings.Contains(r.stdout, "found=") {
		t.Errorf("host credential files visible inside:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "done=1") {
		t.Fatalf("probe did not finish\n%s", r)
	}
	// Control: bound in read-only on purpose, the same file is visible.
	r = run(t, opts{}, []string{"--ro", filepath.Dir(planted[0])}, "/bin/cat", planted[0])
	if r.code != 0 || !strings.Contains(r.stdout, secret) {
		t.Errorf("control: --ro %s does not show the file\n%s", filepath.Dir(planted[0]), r)
	}
}

// CANARY_T: nothing of airlock's environment reaches the sandbox unless
// passed by name.
func TestEnvironment(t *testing.T) {
	secret := randHex(16)
	o := opts{env: []string{"CANARY_T=" + secret, "AWS_SECRET_ACCESS_KEY=" + secret, "SSH_AUTH_SOCK=/tmp/agent." + secret}}
	r := sh(t, o, nil, `env; cat /proc/self/environ /proc/1/environ 2>/dev/null | tr '\0' '\n'`)
	mustOK(t, r, "env")
	if strings.Contains(r.stdout, secret) {
		t.Errorf("airlock's environment leaked into the sandbox:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "PATH=") {
		t.Errorf("control: no PATH in the sandbox's environment\n%s", r)
	}
	// Control: --env CANARY_T passes it, --env K=V sets it.
	r = run(t, o, []string{"--env", "CANARY_T", "--env", "OTHER=v1"}, "/bin/sh", "-c", `echo "t=$CANARY_T"; echo "o=$OTHER"; echo "a=$AWS_SECRET_ACCESS_KEY"`)
	m := kv(r.stdout)
	expect(t, m, "t", secret)
	expect(t, m, "o", "v1")
	expect(t, m, "a", "")
}
