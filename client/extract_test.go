package client

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// leaving lists the links under dir that lead out of it on this host
// (dangling ones by where a write through them would land).
func leaving(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		target, _ := os.Readlink(p)
		to, err := filepath.EvalSymlinks(p)
		if err != nil {
			to = target
			if !filepath.IsAbs(to) {
				to = filepath.Join(filepath.Dir(p), to)
			}
		}
		if to != dir && !strings.HasPrefix(to, dir+"/") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func link(name, target string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target}
}

// TestUntarLinks: links that lead, followed, only within their top-level
// entry are created; the others are left out and listed, whatever the
// tricks (a link to the tree itself, chains, a link that comes before what
// makes it escape). Control: the in-tree links work on the host.
func TestUntarLinks(t *testing.T) {
	dst := t.TempDir()
	x, err := UntarTo(dst, bytes.NewReader(tarOf(t,
		&tar.Header{Name: "t/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "t/sub/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "t/f", Typeflag: tar.TypeReg},
		link("t/sub/in", "../f"),         // kept
		link("t/sub/chain", "../viasub"), // kept: viasub stays in
		link("t/viasub", "sub/in"),       // kept
		link("t/dot", "."),               // kept: the tree itself
		link("t/sub/dangling", "../nothere/x"),
		link("t/abs", "/etc/passwd"),
		link("t/up", "../x"),
		link("t/sub/trick", "../dot/../x"), // dot is t: ../x from there
		link("t/early", "later/../f"),      // lexically t/f, but later (below) is t
		link("t/later", "."),
		link("t/viaabs", "abs/x"), // abs is left out
		link("t/a", "b"),          // a loop
		link("t/b", "a"),
		link("top", "t/f"), // at the top level: leads out of itself
	)), DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var skipped []string
	for _, l := range x.SkippedLinks {
		skipped = append(skipped, strings.TrimPrefix(l.Name, dst+"/"))
	}
	want := []string{"t/abs", "t/up", "t/sub/trick", "t/early", "t/viaabs", "t/a", "t/b", "top"}
	if !slices.Equal(skipped, want) {
		t.Errorf("skipped %q, want %q", skipped, want)
	}
	if l := leaving(t, filepath.Join(dst, "t")); len(l) != 0 {
		t.Errorf("links that lead out of the tree: %v", l)
	}
	for _, n := range []string{"t/sub/in", "t/sub/chain", "t/viasub"} {
		if b, err := os.ReadFile(filepath.Join(dst, n)); err != nil || string(b) != "t/f" {
			t.Errorf("%s reads %q, %v", n, b, err)
		}
	}
	for _, n := range []string{"t/dot", "t/sub/dangling", "t/later"} {
		if fi, err := os.Lstat(filepath.Join(dst, n)); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("%s: %v, want the link kept", n, err)
		}
	}
}

// TestUntarNeverThroughLinks: a link already in dst where the archive has
// a directory is refused before anything moves; one where the archive has
// a file is replaced, not written through. Control: a real directory
// there is merged into.
func TestUntarNeverThroughLinks(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	os.WriteFile(victim, []byte("V"), 0o644)
	archive := tarOf(t,
		&tar.Header{Name: "t/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "t/sub/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "t/sub/x", Typeflag: tar.TypeReg},
		&tar.Header{Name: "t/f", Typeflag: tar.TypeReg},
	)

	dst := t.TempDir()
	os.Symlink(outside, filepath.Join(dst, "t"))
	_, err := UntarTo(dst, bytes.NewReader(archive), DownloadOptions{})
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("dst/t a link to a directory: %v", err)
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 1 {
		t.Errorf("dst holds %v after a refusal", ents)
	}

	dst = t.TempDir()
	os.MkdirAll(filepath.Join(dst, "t"), 0o755)
	os.WriteFile(filepath.Join(dst, "t", "mine"), []byte("M"), 0o644)
	os.Symlink(victim, filepath.Join(dst, "t", "f"))
	if _, err := UntarTo(dst, bytes.NewReader(archive), DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "V" {
		t.Fatalf("the file behind dst/t/f now holds %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "t", "f")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("dst/t/f: %v, %v; want the link replaced by the file", fi, err)
	}
	for n, want := range map[string]string{"t/mine": "M", "t/sub/x": "t/sub/x"} {
		if b, err := os.ReadFile(filepath.Join(dst, n)); err != nil || string(b) != want {
			t.Errorf("merged %s: %q, %v", n, b, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("outside holds %v", ents)
	}
}

// TestUntarSparse: a sparse entry (as GNU tar writes it) lands as a
// sparse file with the same bytes. Control: a regular entry of zeros is
// written whole (sparseness is kept, not made).
func TestUntarSparse(t *testing.T) {
	gnutar, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar command to make a sparse archive")
	}
	src := t.TempDir()
	p := filepath.Join(src, "s")
	f, _ := os.Create(p)
	f.WriteAt([]byte("begin"), 0)
	f.WriteAt([]byte("end"), 16<<20)
	f.Close()
	os.WriteFile(filepath.Join(src, "zeros"), make([]byte, 1<<20), 0o644)
	var st syscall.Stat_t
	syscall.Stat(p, &st)
	if st.Blocks*512 > 1<<20 {
		t.Skipf("%s keeps no holes", src)
	}
	archive, err := exec.Command(gnutar, "-C", src, "--sparse", "--format=posix", "-cf", "-", "s", "zeros").Output()
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := UntarTo(dst, bytes.NewReader(archive), DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dst, "s"))
	want, _ := os.ReadFile(p)
	if !bytes.Equal(got, want) {
		t.Fatalf("content differs (%d bytes, want %d)", len(got), len(want))
	}
	syscall.Stat(filepath.Join(dst, "s"), &st)
	if st.Blocks*512 > 1<<20 {
		t.Errorf("the copy takes %d blocks for %d bytes: not sparse", st.Blocks, st.Size)
	}
	syscall.Stat(filepath.Join(dst, "zeros"), &st)
	if st.Blocks*512 < 1<<20 {
		t.Errorf("the dense file of zeros became sparse (%d blocks)", st.Blocks)
	}
}

// TestUntarLimit: an archive over MaxSize, by its bytes (many entries) or
// by the sizes its files claim, fails with code too_large and leaves
// nothing in dst. Control: the same under a higher limit extracts.
func TestUntarLimit(t *testing.T) {
	var hdrs []*tar.Header
	for i := range 100 {
		hdrs = append(hdrs, &tar.Header{Name: "d" + strings.Repeat("x", i) + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	}
	many := tarOf(t, hdrs...)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 40})
	tw.Write([]byte("some"))
	claims := buf.Bytes() // a header claiming 1 TiB, cut short
	for name, c := range map[string]struct {
		archive []byte
		max     int64
	}{"100 entries": {many, 20 << 10}, "1 TiB claimed": {claims, 0}} {
		dst := t.TempDir()
		_, err := UntarTo(dst, bytes.NewReader(c.archive), DownloadOptions{MaxSize: c.max})
		var e *Error
		if !errors.As(err, &e) || e.Code != api.CodeTooLarge || !strings.Contains(e.Message, "limit") {
			t.Errorf("%s: %v, want a too_large error", name, err)
		}
		if ents, _ := os.ReadDir(dst); len(ents) != 0 {
			t.Errorf("%s: dst holds %v", name, ents)
		}
	}
	dst := t.TempDir()
	if _, err := UntarTo(dst, bytes.NewReader(many), DownloadOptions{MaxSize: 1 << 20}); err != nil {
		t.Fatalf("control: %v", err)
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 100 {
		t.Errorf("control: %d entries", len(ents))
	}
}

// TestDownloadTo: against a real HTTP server speaking the daemon's
// archive protocol: a stream that fails after the status (its error
// trailer) or holds two top-level entries leaves nothing behind; a link at
// dst is refused before any request. Control: a sound stream lands at dst.
func TestDownloadTo(t *testing.T) {
	sound := tarOf(t,
		&tar.Header{Name: "proj/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "proj/a", Typeflag: tar.TypeReg},
	)
	var body []byte
	var trailer string
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		w.Header().Set("Trailer", api.HeaderError)
		w.WriteHeader(http.StatusOK)
		w.Write(body)
		if trailer != "" {
			w.Header().Set(api.HeaderError, trailer)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	parent := t.TempDir()
	dst := filepath.Join(parent, "copy")

	body, trailer = sound[:1000], `{"code":"too_large","message":"download of /workspace/proj: more than 1000 bytes, the limit"}`
	_, err = c.DownloadTo(ctx, "sb-0123456789abcdef", "proj", dst, DownloadOptions{})
	var e *Error
	if !errors.As(err, &e) || e.Code != api.CodeTooLarge || !strings.Contains(e.Message, "more than 1000 bytes") {
		t.Fatalf("a stream that failed: %v", err)
	}
	body, trailer = tarOf(t, &tar.Header{Name: "a", Typeflag: tar.TypeReg}, &tar.Header{Name: "b", Typeflag: tar.TypeReg}), ""
	if _, err := c.DownloadTo(ctx, "sb-0123456789abcdef", "a", dst, DownloadOptions{}); err == nil || !strings.Contains(err.Error(), "second top-level entry") {
		t.Fatalf("two top-level entries: %v", err)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 0 {
		t.Fatalf("failed downloads left %v", ents)
	}

	body = sound
	if _, err := c.DownloadTo(ctx, "sb-0123456789abcdef", "proj", dst, DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a")); err != nil || string(b) != "proj/a" {
		t.Fatalf("control: %q, %v", b, err)
	}

	n := requests
	os.Symlink(t.TempDir(), filepath.Join(parent, "trap"))
	if _, err := c.DownloadTo(ctx, "sb-0123456789abcdef", "proj", filepath.Join(parent, "trap"), DownloadOptions{}); err == nil || !strings.Contains(err.Error(), "symbolic link") || requests != n {
		t.Fatalf("dst a link: %v (%d requests)", err, requests-n)
	}
}

// TestUntarTwiceNoEscape: a link checked as text past a name its archive
// lacks could climb out through a link an earlier download left in the same
// destination. Control: the earlier download's link itself is kept.
func TestUntarTwiceNoEscape(t *testing.T) {
	dst := t.TempDir()
	secret := filepath.Join(filepath.Dir(dst), "SECRET-"+filepath.Base(dst))
	if err := os.WriteFile(secret, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(secret)
	first := tarOf(t,
		&tar.Header{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "top/x/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "top/x/y/", Typeflag: tar.TypeDir, Mode: 0o755},
		link("top/x/y/d", "../.."), // top itself: inside
	)
	if x, err := UntarTo(dst, bytes.NewReader(first), DownloadOptions{}); err != nil || len(x.SkippedLinks) != 0 {
		t.Fatalf("first download: %v, skipped %v", err, x)
	}
	if _, err := os.Lstat(filepath.Join(dst, "top/x/y/d")); err != nil {
		t.Fatalf("control: the first download's link: %v", err)
	}
	second := tarOf(t,
		&tar.Header{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "top/x/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "top/x/y/", Typeflag: tar.TypeDir, Mode: 0o755},
		link("top/x/y/l", "d/../../../"+filepath.Base(secret)),
	)
	x, err := UntarTo(dst, bytes.NewReader(second), DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(x.SkippedLinks) != 1 {
		t.Errorf("skipped %v, want top/x/y/l", x.SkippedLinks)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "top/x/y/l")); err == nil {
		t.Fatalf("a link from the second download reads a host file: %q", b)
	}
	if l := leaving(t, filepath.Join(dst, "top")); len(l) != 0 {
		t.Errorf("links that lead out of the tree: %v", l)
	}
}
