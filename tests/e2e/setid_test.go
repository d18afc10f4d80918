//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A root-owned workspace is attached so that what root inside creates there
// belongs to host root: a setuid or setgid bit set inside would hand host
// root to anyone who can run the file on the host. chmod, open(O_CREAT)
// and mknod with those bits fail; the same calls without them succeed.
func TestNoSetIDInHostFiles(t *testing.T) {
	needRoot(t)
	ws := t.TempDir() // owned by root
	if err := os.Chmod(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	r := run(t, opts{}, []string{"--workspace", ws}, "/bin/sh", "-c", `
cp /bin/true /workspace/plain && chmod 755 /workspace/plain && echo chmod-ok
cp /bin/true /workspace/suid && chmod 4755 /workspace/suid 2>/dev/null && echo SUID
chmod 2755 /workspace/suid 2>/dev/null && echo SGID
chmod u+s /workspace/suid 2>/dev/null && echo U+S
python3 -c 'import os; os.close(os.open("/workspace/created", os.O_CREAT|os.O_WRONLY, 0o4755))' 2>/dev/null && echo CREATED
python3 -c 'import os; os.close(os.open("/workspace/created2", os.O_CREAT|os.O_WRONLY, 0o755)); print("create-ok")'
python3 -c 'import os; os.mknod("/workspace/node", 0o104755)' 2>/dev/null && echo MKNOD
true`)
	if r.code != 0 || !strings.Contains(r.stdout, "chmod-ok") || !strings.Contains(r.stdout, "create-ok") {
		t.Fatalf("controls: chmod 755 and a plain create must work\n%s", r)
	}
	for _, bad := range []string{"SUID", "SGID", "U+S", "CREATED", "MKNOD"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("%s succeeded inside\n%s", bad, r)
		}
	}
	// The host-side oracle: no file in the workspace carries a set-id bit.
	filepath.Walk(ws, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("host file %s is %v", p, fi.Mode())
		}
		return nil
	})
	if fi, err := os.Stat(filepath.Join(ws, "plain")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("control: host file plain: %v %v", fi, err)
	}
}
