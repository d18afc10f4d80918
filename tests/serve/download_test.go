//go:build linux

package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// cli runs the airlock CLI against d (stopped after a minute, so a
// download that does not end fails the test instead of filling the disk)
// and returns its stdout, stderr and exit status.
func cli(t *testing.T, d *daemon, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, airlockBin, args...)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOST=unix://"+d.sock)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("airlock %s: still running after a minute (killed); stderr %q", strings.Join(args, " "), errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// isLink reports whether p is a symbolic link, and its target.
func isLink(p string) (bool, string) {
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return false, ""
	}
	t, _ := os.Readlink(p)
	return true, t
}

// linksLeaving lists the symlinks under dir that, followed on this host,
// lead out of dir (the oracle of the link rules: the host's own view); a
// dangling one counts by where a write through it would land (lexically).
func linksLeaving(t *testing.T, dir string) []string {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		target, _ := os.Readlink(p)
		to, err := filepath.EvalSymlinks(p)
		if err != nil { // dangling: where a write through it would land
			to = target
			if !filepath.IsAbs(to) {
				to = filepath.Join(filepath.Dir(p), to)
			}
		}
		if to != real && !strings.HasPrefix(to, real+"/") {
			out = append(out, p+" -> "+target)
		}
		return nil
	})
	return out
}

// noTemporaries fails the test if a download left its temporary
// directory in dir.
func noTemporaries(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".airlock-") {
			t.Errorf("%s left in %s", e.Name(), dir)
		}
	}
}

// TestDownloadLinks (issue 10, item 3): a download never plants a host
// symlink the sandbox chose. A link given as the path is followed in the
// sandbox (its content is written); in a tree, links that stay in the tree
// are kept, the others are left out with a warning, or with --follow-links
// copied as the file they point to; a link at the destination is neither
// written through nor replaced. Through the CLI and the SDK; the host's
// files are the oracle.
func TestDownloadLinks(t *testing.T) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	d.sh(t, sb.ID, `set -e
cd /workspace
echo T > target.txt
ln -s /workspace/target.txt a
mkdir -p tree/sub
echo F > tree/f
ln -s ../f tree/sub/in
ln -s . tree/dot
ln -s /etc/passwd tree/abs
ln -s ../target.txt tree/up
ln -s ../dot/../target.txt tree/sub/trick`)
	out := t.TempDir()

	// A link as the path: its content, not a link (CLI and SDK).
	if _, errs, code := cli(t, d, "cp", sb.ID+":/workspace/a", filepath.Join(out, "a-cli")); code != 0 {
		t.Fatalf("cp of a link: exit %d: %s", code, errs)
	}
	if _, err := d.c.DownloadTo(ctx, sb.ID, "a", filepath.Join(out, "a-sdk"), client.DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a-cli", "a-sdk"} {
		p := filepath.Join(out, n)
		if link, target := isLink(p); link {
			t.Fatalf("%s: the download planted a link to %s", n, target)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != "T\n" {
			t.Fatalf("%s: %q, %v; want the content of the link's target", n, b, err)
		}
	}

	// A tree: in-tree links kept (control), the others left out, listed.
	_, errs, code := cli(t, d, "cp", sb.ID+":/workspace/tree", filepath.Join(out, "tree-cli"))
	if code != 0 {
		t.Fatalf("cp of a tree: exit %d: %s", code, errs)
	}
	for _, want := range []string{"left out 3 symbolic links", `tree-cli/abs" -> "/etc/passwd"`, `tree-cli/up" -> "../target.txt"`, `tree-cli/sub/trick" -> "../dot/../target.txt"`} {
		if !strings.Contains(errs, want) {
			t.Errorf("cp's warning %q does not say %q", errs, want)
		}
	}
	x, err := d.c.DownloadTo(ctx, sb.ID, "tree", filepath.Join(out, "tree-sdk"), client.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(x.SkippedLinks) != 3 {
		t.Errorf("SDK: skipped %v, want abs, up and sub/trick", x.SkippedLinks)
	}
	for _, tree := range []string{"tree-cli", "tree-sdk"} {
		dir := filepath.Join(out, tree)
		if l := linksLeaving(t, dir); len(l) != 0 {
			t.Errorf("%s: links that lead out of it: %v", tree, l)
		}
		if link, target := isLink(filepath.Join(dir, "sub/in")); !link || target != "../f" {
			t.Errorf("%s/sub/in: link %v to %q, want the in-tree link kept", tree, link, target)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "sub/in")); err != nil || string(b) != "F\n" {
			t.Errorf("%s/sub/in reads %q, %v", tree, b, err)
		}
		if link, _ := isLink(filepath.Join(dir, "dot")); !link {
			t.Errorf("%s/dot: the link to the tree itself was not kept", tree)
		}
		for _, n := range []string{"abs", "up", "sub/trick"} {
			if _, err := os.Lstat(filepath.Join(dir, n)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s/%s: %v, want it left out", tree, n, err)
			}
		}
	}

	// --follow-links: the links out of the tree come as the files they
	// point to in the sandbox.
	if _, errs, code := cli(t, d, "cp", "--follow-links", sb.ID+":/workspace/tree", filepath.Join(out, "tree-follow")); code != 0 || strings.Contains(errs, "left out") {
		t.Fatalf("cp --follow-links: exit %d: %s", code, errs)
	}
	passwd := d.sh(t, sb.ID, "cat /etc/passwd")
	for n, want := range map[string]string{"abs": passwd, "up": "T\n", "sub/trick": "T\n"} {
		p := filepath.Join(out, "tree-follow", n)
		if link, _ := isLink(p); link {
			t.Errorf("--follow-links: %s is still a link", n)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("--follow-links: %s = %q, %v", n, b, err)
		}
	}
	if link, _ := isLink(filepath.Join(out, "tree-follow", "sub/in")); !link {
		t.Errorf("--follow-links: the in-tree link sub/in became a copy")
	}

	// A link at the destination is neither written through nor replaced.
	victim := filepath.Join(out, "victim")
	os.WriteFile(victim, []byte("V"), 0o600)
	victimDir := filepath.Join(out, "victim-dir")
	os.Mkdir(victimDir, 0o755)
	os.Symlink(victim, filepath.Join(out, "trap"))
	os.Symlink(victimDir, filepath.Join(out, "dirtrap"))
	for _, c := range []struct{ src, dst string }{{"a", "trap"}, {"tree", "dirtrap"}, {"a", "dirtrap"}} {
		_, errs, code := cli(t, d, "cp", sb.ID+":"+c.src, filepath.Join(out, c.dst))
		if code == 0 || !strings.Contains(errs, "symbolic link") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("cp %s onto the link %s: exit %d, %q; want one line refusing it", c.src, c.dst, code, errs)
		}
		if _, err := d.c.DownloadTo(ctx, sb.ID, c.src, filepath.Join(out, c.dst), client.DownloadOptions{}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("DownloadTo %s onto the link %s: %v", c.src, c.dst, err)
		}
	}
	// Inside a directory being merged into, too.
	os.MkdirAll(filepath.Join(out, "merge", "tree"), 0o755)
	os.Symlink(victimDir, filepath.Join(out, "merge", "tree", "sub"))
	if _, errs, code := cli(t, d, "cp", sb.ID+":/workspace/tree", filepath.Join(out, "merge")); code == 0 || !strings.Contains(errs, "symbolic link") {
		t.Errorf("cp into a tree whose sub is a link: exit %d, %q", code, errs)
	}
	if b, _ := os.ReadFile(victim); string(b) != "V" {
		t.Fatalf("the file behind the link now holds %q", b)
	}
	if ents, _ := os.ReadDir(victimDir); len(ents) != 0 {
		t.Fatalf("the directory behind the link now holds %v", ents)
	}
	if link, _ := isLink(filepath.Join(out, "trap")); !link {
		t.Fatal("the link at the destination was replaced")
	}
	// Control: naming the directory a link points to (DST/) is the
	// user's own choice.
	if _, errs, code := cli(t, d, "cp", sb.ID+":/workspace/tree", filepath.Join(out, "dirtrap")+"/"); code != 0 {
		t.Fatalf("cp into dirtrap/: exit %d: %s", code, errs)
	}
	if b, err := os.ReadFile(filepath.Join(victimDir, "tree", "f")); err != nil || string(b) != "F\n" {
		t.Fatalf("cp into dirtrap/: %q, %v", b, err)
	}
	noTemporaries(t, out)
}

// TestDownloadLimits (issue 16, item 4): downloads are bounded by default
// (raisable per call), sparse files stay sparse on the host, and FIFOs,
// sockets and devices are refused, through the CLI, the SDK and the API.
func TestDownloadLimits(t *testing.T) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	out := t.TempDir()

	// 1 TiB of holes: refused by default, nothing written.
	d.sh(t, sb.ID, "truncate -s 1T /workspace/huge")
	_, errs, code := cli(t, d, "cp", sb.ID+":/workspace/huge", out)
	if code == 0 || !strings.Contains(errs, "limit") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("cp of a 1 TiB sparse file: exit %d, %q; want one line about the limit", code, errs)
	}
	_, err := d.c.DownloadTo(ctx, sb.ID, "huge", filepath.Join(out, "huge-sdk"), client.DownloadOptions{})
	wantCode(t, "DownloadTo of a 1 TiB sparse file", err, http.StatusRequestEntityTooLarge)
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Fatalf("refused downloads left %v", ents)
	}

	// A sparse file under the limit lands sparse (st_blocks), whole.
	d.sh(t, sb.ID, `truncate -s 256M /workspace/sparse && printf hello | dd of=/workspace/sparse bs=1 seek=200000000 conv=notrunc 2>/dev/null`)
	if blocks := strings.TrimSpace(d.sh(t, sb.ID, "stat -c %b /workspace/sparse")); atoi(blocks) > 2048 {
		t.Skipf("the workspace keeps no holes (%s blocks)", blocks)
	}
	if _, errs, code := cli(t, d, "cp", sb.ID+":/workspace/sparse", filepath.Join(out, "sparse-cli")); code != 0 {
		t.Fatalf("cp of a sparse file: exit %d: %s", code, errs)
	}
	if _, err := d.c.DownloadTo(ctx, sb.ID, "sparse", filepath.Join(out, "sparse-sdk"), client.DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"sparse-cli", "sparse-sdk"} {
		p := filepath.Join(out, n)
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Size != 256<<20 || st.Blocks*512 > 1<<20 {
			t.Errorf("%s: %d bytes in %d blocks; want 256 MiB in a few", n, st.Size, st.Blocks)
		}
		f, _ := os.Open(p)
		b := make([]byte, 5)
		f.ReadAt(b, 200000000)
		f.Close()
		if string(b) != "hello" {
			t.Errorf("%s: %q at the data's offset", n, b)
		}
	}

	// The limit, raised and lowered per call: a 1 MiB file.
	d.sh(t, sb.ID, "head -c 1048576 /dev/urandom > /workspace/mib")
	if _, errs, code := cli(t, d, "cp", "--max-size", "512K", sb.ID+":/workspace/mib", filepath.Join(out, "mib-small")); code == 0 || !strings.Contains(errs, "limit") {
		t.Fatalf("cp --max-size 512K of 1 MiB: exit %d, %q", code, errs)
	}
	if _, err := os.Lstat(filepath.Join(out, "mib-small")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused download left its file: %v", err)
	}
	if stdout, errs, code := cli(t, d, "cp", "--max-size", "512K", sb.ID+":/workspace/mib", "-"); code == 0 || stdout != "" || !strings.Contains(errs, "limit") {
		t.Fatalf("cp --max-size 512K of 1 MiB to stdout: exit %d, %d bytes out, %q", code, len(stdout), errs)
	}
	if _, errs, code := cli(t, d, "cp", "--max-size", "2M", sb.ID+":/workspace/mib", filepath.Join(out, "mib")); code != 0 {
		t.Fatalf("cp --max-size 2M of 1 MiB: exit %d: %s", code, errs)
	}
	if fi, err := os.Stat(filepath.Join(out, "mib")); err != nil || fi.Size() != 1<<20 {
		t.Fatalf("under the limit: %v, %v", fi, err)
	}
	_, err = d.c.DownloadTo(ctx, sb.ID, "mib", filepath.Join(out, "mib-sdk"), client.DownloadOptions{MaxSize: 1 << 19})
	wantCode(t, "DownloadTo over MaxSize", err, http.StatusRequestEntityTooLarge)
	_, _, err = d.c.ReadFile(ctx, sb.ID, "mib", client.DownloadOptions{MaxSize: 1 << 19})
	wantCode(t, "ReadFile over MaxSize", err, http.StatusRequestEntityTooLarge)
	rc, fi, err := d.c.ReadFile(ctx, sb.ID, "mib", client.DownloadOptions{})
	if err != nil || fi.Size != 1<<20 {
		t.Fatalf("ReadFile under the limit: %+v, %v", fi, err)
	}
	rc.Close()
	for q, status := range map[string]int{"max_size=abc": 400, "max_size=0": 400, "max_size=-5": 400, "max_size=1000": 413, "max_size=2000000": 200} {
		for _, ep := range []string{"files", "archive"} {
			resp, body := d.rawRequest(t, "GET", fmt.Sprintf("/v1/sandboxes/%s/%s?path=mib&%s", sb.ID, ep, q), nil, nil)
			if resp.StatusCode != status || (status == 413 && !strings.Contains(string(body), api.CodeTooLarge)) {
				t.Errorf("GET %s?%s: %d %.200s, want %d", ep, q, resp.StatusCode, body, status)
			}
		}
	}

	// FIFOs, sockets and devices: a clear error, nothing written, no hang.
	d.sh(t, sb.ID, `mkfifo /workspace/fifo && mkdir /workspace/withfifo && mkfifo /workspace/withfifo/p && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("/workspace/sock")'`)
	for p, want := range map[string]string{"/workspace/fifo": "named pipe", "/workspace/withfifo": "named pipe", "/workspace/sock": "socket", "/dev/null": "character device"} {
		_, errs, code := cli(t, d, "cp", sb.ID+":"+p, filepath.Join(out, "special"))
		if code == 0 || !strings.Contains(errs, want) {
			t.Errorf("cp %s: exit %d, %q; want an error saying %q", p, code, errs, want)
		}
		_, err := d.c.DownloadTo(ctx, sb.ID, p, filepath.Join(out, "special"), client.DownloadOptions{})
		wantCode(t, "DownloadTo "+p, err, http.StatusBadRequest)
		if _, err := os.Lstat(filepath.Join(out, "special")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("cp %s left a file", p)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, _, err = d.c.ReadFile(rctx, sb.ID, "fifo", client.DownloadOptions{})
	wantCode(t, "ReadFile of a FIFO", err, http.StatusBadRequest)
	noTemporaries(t, out)
}
