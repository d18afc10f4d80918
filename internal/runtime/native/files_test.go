//go:build linux

package native_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// TestFiles drives every file operation the agent serves, with the API
// probes of shared/probes.md (traversal, symlinked parent, NUL, long names)
// next to the same operations done right.
func TestFiles(t *testing.T) {
	needRoot(t)
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755)
	sb := newSandbox(t, &policy.Policy{Workspace: ws})
	fs := sb.(runtime.Files)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Write and read back 5 MiB, streamed both ways.
	content := bytes.Repeat([]byte("0123456789abcdef"), 5<<16)
	if err := fs.WriteFile(ctx, "data/big.bin", 0o600, bytes.NewReader(content)); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("write into a missing directory: %v, want not found", err)
	}
	if err := fs.MkdirAll(ctx, "data/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteFile(ctx, "data/big.bin", 0o600, bytes.NewReader(content)); err != nil {
		t.Fatal(err)
	}
	if h, err := os.ReadFile(filepath.Join(ws, "data", "big.bin")); err != nil || sha256.Sum256(h) != sha256.Sum256(content) {
		t.Fatalf("host sees a different file (%d bytes, %v)", len(h), err)
	}
	r, info, err := fs.ReadFile(ctx, "/workspace/data/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(got, content) || info.Size != int64(len(content)) || info.Mode != 0o600 {
		t.Fatalf("read back %d bytes, info %+v", len(got), info)
	}

	// Stat, list, rename, remove.
	if fi, err := fs.Stat(ctx, "data"); err != nil || !fi.Dir {
		t.Fatalf("stat data: %+v %v", fi, err)
	}
	if err := fs.Rename(ctx, "data/big.bin", "data/sub/moved.bin"); err != nil {
		t.Fatal(err)
	}
	entries, err := fs.ReadDir(ctx, "data/sub")
	if err != nil || len(entries) != 1 || entries[0].Name != "moved.bin" {
		t.Fatalf("list: %+v %v", entries, err)
	}
	if err := fs.Remove(ctx, "data", false); !errors.Is(err, errdefs.ErrConflict) || errors.Is(err, runtime.ErrExists) {
		t.Errorf("removing a non-empty directory without recursive: %v, want failed precondition (not empty)", err)
	}
	if err := fs.Remove(ctx, "data", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "data")); !os.IsNotExist(err) {
		t.Errorf("data still on the host: %v", err)
	}
	if _, err := fs.Stat(ctx, "data"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("stat of a removed path: %v", err)
	}

	// Traversal resolves in the sandbox: its own /etc/passwd, not the host's.
	r, _, err = fs.ReadFile(ctx, "../../../../etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	passwd, _ := io.ReadAll(r)
	r.Close()
	host, _ := os.ReadFile("/etc/passwd")
	if bytes.Equal(passwd, host) || !strings.HasPrefix(string(passwd), "root:x:0:0") {
		t.Errorf("../../etc/passwd read the host's file or nothing: %q", passwd)
	}
	// A symlinked parent pointing at /etc lands in the sandbox's /etc
	// (its copy-on-write layer), never the host's.
	if err := os.Symlink("/etc", filepath.Join(ws, "d")); err != nil {
		t.Fatal(err)
	}
	marker := "airlock-files-test-" + filepath.Base(ws)
	if err := fs.WriteFile(ctx, "d/"+marker, 0o644, strings.NewReader("x")); err != nil {
		t.Fatalf("write through a symlinked parent: %v", err)
	}
	if _, err := os.Stat("/etc/" + marker); !os.IsNotExist(err) {
		os.Remove("/etc/" + marker)
		t.Fatalf("a write through a symlinked parent reached the host's /etc")
	}
	if _, err := fs.Stat(ctx, "/etc/"+marker); err != nil {
		t.Errorf("control: the file is in the sandbox's own /etc: %v", err)
	}

	// Protected workspace paths stay read-only through the file API too.
	if err := fs.WriteFile(ctx, ".git/hooks/pre-commit", 0o755, strings.NewReader("#!/bin/sh\n")); !errors.Is(err, runtime.ErrPermission) {
		t.Errorf("write to .git/hooks: %v, want permission denied", err)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git/hooks/pre-commit")); !os.IsNotExist(err) {
		t.Errorf("a hook reached the host workspace")
	}

	// Bad input: clear errors, nothing written.
	for _, p := range []string{"", "a\x00b", "/" + strings.Repeat("n", 5000)} {
		if err := fs.WriteFile(ctx, p, 0o644, strings.NewReader("x")); !errors.Is(err, runtime.ErrInvalid) {
			t.Errorf("write %.20q: %v, want invalid", p, err)
		}
	}
	if err := fs.Remove(ctx, "/workspace", true); !errors.Is(err, runtime.ErrInvalid) {
		t.Errorf("removing the workspace itself: %v", err)
	}
	if _, _, err := fs.ReadFile(ctx, "/workspace"); !errors.Is(err, runtime.ErrInvalid) {
		t.Errorf("reading a directory: %v", err)
	}
}

// tarOf builds a tar archive from (name, body) pairs; a body starting with
// "->" makes a symlink to the rest.
func tarOf(t *testing.T, entries ...[2]string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e[0], Mode: 0o644, Size: int64(len(e[1])), Typeflag: tar.TypeReg}
		if target, ok := strings.CutPrefix(e[1], "->"); ok {
			hdr = &tar.Header{Name: e[0], Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			tw.Write([]byte(e[1]))
		}
	}
	tw.Close()
	return &buf
}

// TestUploadDownload: a tree goes in and comes back out as tar; the upload
// probes of shared/probes.md (A1 traversal and odd names, A3 symlinked
// parent) are refused with a clear error and write nothing outside the
// target directory.
func TestUploadDownload(t *testing.T) {
	needRoot(t)
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	sb := newSandbox(t, &policy.Policy{Workspace: ws})
	fs := sb.(runtime.Files)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := fs.Upload(ctx, "in", tarOf(t, [2]string{"a.txt", "A"}, [2]string{"sub/b.txt", "B"}, [2]string{"link", "->a.txt"})); err != nil {
		t.Fatalf("upload: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "in", "sub", "b.txt")); string(b) != "B" {
		t.Fatalf("host sees %q in in/sub/b.txt", b)
	}
	rc, err := fs.Download(ctx, "in", runtime.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[hdr.Name] = string(body) + hdr.Linkname
	}
	rc.Close()
	for name, want := range map[string]string{"in/": "", "in/a.txt": "A", "in/sub/b.txt": "B", "in/link": "a.txt"} {
		if got[name] != want {
			t.Errorf("download: %s = %q, want %q (all: %v)", name, got[name], want, got)
		}
	}

	// A symlink already in the target (A3): entries through it are
	// refused by os.Root instead of landing in /etc.
	if err := os.Symlink("/etc", filepath.Join(ws, "in", "d")); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][2]string{
		"traversal":        {"../../etc/cron.d/x", "x"},
		"absolute":         {"/etc/passwd", "x"},
		"through symlink":  {"d/cron.d/x", "x"},
		"planted symlink":  {"e", "->/etc"},
		"4096-byte name":   {strings.Repeat("n", 4097), "x"},
		"encoded dot-dots": {"%2e%2e/x", "x"}, // a literal name: allowed, stays inside
	} {
		archive := tarOf(t, body)
		if name == "planted symlink" {
			archive = tarOf(t, body, [2]string{"e/passwd", "owned"})
		}
		err := fs.Upload(ctx, "in", archive)
		if name == "encoded dot-dots" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			} else if _, serr := os.Stat(filepath.Join(ws, "in", "%2e%2e", "x")); serr != nil {
				t.Errorf("%s: not inside the target: %v", name, serr)
			}
			continue
		}
		if !errors.Is(err, runtime.ErrInvalid) {
			t.Errorf("upload with %s: %v, want an invalid-argument refusal", name, err)
		}
	}
	host, _ := os.ReadFile("/etc/passwd")
	if strings.Contains(string(host), "owned") {
		t.Fatal("an upload reached the host's /etc/passwd")
	}
	if out, st := run(t, sb, "/bin/sh", "-c", "cat /etc/passwd; ls /etc/cron.d 2>&1"); strings.Contains(out, "owned") || st.Code < 0 {
		t.Errorf("an upload reached the sandbox's /etc: %q", out)
	}
}

// A file operation on a sandbox that has ended is a conflict (the API's
// 409, as for an exec), not an internal error: what a call racing a delete
// gets. Control: the same call before the end works.
func TestFilesAfterEnd(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, &policy.Policy{})
	fs := sb.(runtime.Files)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := fs.Stat(ctx, "/workspace"); err != nil {
		t.Fatalf("control: %v", err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := fs.Stat(ctx, "/workspace")
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("stat after the end: %v, want a conflict", err)
	}
}
