package agent

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// archive runs tarOut and returns the stream, failing the test on error.
func archive(t *testing.T, src string, opts archiveOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := tarOut(src, &buf, opts, func() error { return nil }); err != nil {
		t.Fatalf("tarOut %s: %v", src, err)
	}
	return buf.Bytes()
}

// entry is what a tar reader sees of one entry.
type entry struct {
	typ          byte
	size         int64
	body, target string
}

func readArchive(t *testing.T, b []byte) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		out[h.Name] = entry{h.Typeflag, h.Size, string(body), h.Linkname}
	}
}

// writeAt writes s at offset off of the file p.
func writeAt(t *testing.T, p string, off int64, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		t.Fatal(err)
	}
}

// sparseFile makes a file of size bytes with two short runs of data and
// skips the test where the filesystem does not keep holes.
func sparseFile(t *testing.T, p string, size int64) {
	t.Helper()
	if err := os.Truncate(p, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	writeAt(t, p, 4096, "hello")
	writeAt(t, p, size/2, "world")
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 >= size {
		t.Skipf("%s keeps no holes (%d blocks for %d bytes)", filepath.Dir(p), st.Blocks, size)
	}
}

// TestTarOutSparse: a sparse file travels as its data (PAX sparse 1.0):
// the stream is small, Go's reader and GNU tar read back the same bytes,
// and GNU tar makes a sparse file of it. Control: a dense file of the same
// content shape goes whole.
func TestTarOutSparse(t *testing.T) {
	dir := t.TempDir()
	const size = 64 << 20
	p := filepath.Join(dir, "sparse")
	sparseFile(t, p, size)
	b := archive(t, p, archiveOptions{})
	if len(b) > 64<<10 {
		t.Fatalf("the archive of a %d-byte sparse file with 10 bytes of data is %d bytes", size, len(b))
	}
	m, err := measureArchive(p, archiveOptions{})
	if err != nil || m.stream != int64(len(b)) || m.content != size {
		t.Fatalf("measured %+v, %v; the stream is %d bytes", m, err, len(b))
	}
	tr := tar.NewReader(bytes.NewReader(b))
	h, err := tr.Next()
	if err != nil || h.Name != "sparse" || h.Size != size || h.Typeflag != tar.TypeReg {
		t.Fatalf("header %+v, %v", h, err)
	}
	got, err := io.ReadAll(tr)
	if err != nil || int64(len(got)) != size {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	want, _ := os.ReadFile(p)
	if !bytes.Equal(got, want) {
		t.Fatal("the content read back differs")
	}

	// Control: the same tree, dense, is sent whole.
	dense := filepath.Join(dir, "dense")
	if err := os.WriteFile(dense, bytes.Repeat([]byte{1}, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if b := archive(t, dense, archiveOptions{}); len(b) < 1<<20 {
		t.Fatalf("a dense 1 MiB file archived in %d bytes", len(b))
	}

	gnutar, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar command to check the format against")
	}
	out := t.TempDir()
	cmd := exec.Command(gnutar, "-xf", "-", "-C", out)
	cmd.Stdin = bytes.NewReader(b)
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v: %s", err, o)
	}
	back, err := os.ReadFile(filepath.Join(out, "sparse"))
	if err != nil || !bytes.Equal(back, want) {
		t.Fatalf("GNU tar extracted %d bytes (%v), not the file", len(back), err)
	}
	var st unix.Stat_t
	unix.Stat(filepath.Join(out, "sparse"), &st)
	if st.Blocks*512 > 1<<20 {
		t.Errorf("GNU tar's copy takes %d blocks: not sparse", st.Blocks)
	}
}

// TestTarOutSizes: the size measured before the stream is the stream's,
// whatever the names (long, non-ASCII), links and sparse files.
func TestTarOutSizes(t *testing.T) {
	dir := t.TempDir()
	top := filepath.Join(dir, "tree")
	long := strings.Repeat("d", 120)
	os.MkdirAll(filepath.Join(top, long, "sub"), 0o755)
	os.WriteFile(filepath.Join(top, long, "sub", strings.Repeat("f", 150)), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(top, "é€.txt"), bytes.Repeat([]byte("y"), 1000), 0o600)
	os.Symlink(strings.Repeat("../", 40)+"target", filepath.Join(top, "l"))
	sparseFile(t, filepath.Join(top, long, "sparse"), 8<<20)
	b := archive(t, top, archiveOptions{})
	m, err := measureArchive(top, archiveOptions{})
	if err != nil || m.stream != int64(len(b)) {
		t.Fatalf("measured %+v, %v; the stream is %d bytes", m, err, len(b))
	}
	got := readArchive(t, b)
	if e := got["tree/"+long+"/sparse"]; e.size != 8<<20 || !strings.Contains(e.body, "hello") {
		t.Errorf("sparse entry with a long directory name: %d bytes", e.size)
	}
	if e := got["tree/é€.txt"]; e.size != 1000 {
		t.Errorf("non-ASCII name: %+v", e.size)
	}
}

// TestTarOutLimit: an archive over max is refused before a byte is
// written (ready is not called); one at the limit goes through. A sparse
// file counts its full size.
func TestTarOutLimit(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, bytes.Repeat([]byte("z"), 10000), 0o644)
	m, err := measureArchive(p, archiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	called := false
	err = tarOut(p, &buf, archiveOptions{max: m.bytes() - 1}, func() error { called = true; return nil })
	if errKind(err) != KindTooLarge || !strings.Contains(err.Error(), "limit") || called || buf.Len() != 0 {
		t.Fatalf("over the limit: %v (kind %s), ready called %v, %d bytes written", err, errKind(err), called, buf.Len())
	}
	if b := archive(t, p, archiveOptions{max: m.bytes()}); int64(len(b)) != m.stream {
		t.Fatalf("at the limit: %d bytes, measured %d", len(b), m.stream)
	}

	sp := filepath.Join(dir, "sparse")
	sparseFile(t, sp, 64<<20)
	err = tarOut(sp, io.Discard, archiveOptions{max: 1 << 20}, func() error { return nil })
	if errKind(err) != KindTooLarge {
		t.Fatalf("a 64 MiB sparse file under a 1 MiB limit: %v", err)
	}
}

// TestTarOutSpecialFiles: FIFOs, sockets and devices are refused with an
// error naming the file and its kind, given as the path or met in a tree
// (a FIFO is not opened: that would block). Control: the same tree without
// them archives.
func TestTarOutSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(tree, 0o755)
	os.WriteFile(filepath.Join(tree, "ok.txt"), []byte("ok"), 0o644)
	if got := readArchive(t, archive(t, tree, archiveOptions{})); got["tree/ok.txt"].body != "ok" {
		t.Fatalf("control: %v", got)
	}
	fifo := filepath.Join(tree, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	link := filepath.Join(dir, "link-to-fifo")
	os.Symlink(fifo, link)
	for p, want := range map[string]string{
		fifo: "named pipe", tree: "named pipe", link: "named pipe",
		sock: "socket", "/dev/null": "character device",
	} {
		err := tarOut(p, io.Discard, archiveOptions{}, func() error { t.Errorf("%s: ready called", p); return nil })
		if errKind(err) != KindInvalid || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an invalid-kind error saying %q", p, err, want)
		}
	}
	// A read of a FIFO is refused without blocking, too.
	if _, err := openRegular(fifo); errKind(err) != KindInvalid {
		t.Errorf("openRegular(fifo): %v", err)
	}
}

// TestTarOutLinks: the path itself is followed (a link given as the path
// is archived as what it points to, under its own name); links in a tree
// are stored as links, and with follow, those that lead out of the tree
// and point to a regular file are stored as that file.
func TestTarOutLinks(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "secret"), []byte("S"), 0o644)
	os.Mkdir(filepath.Join(dir, "outdir"), 0o755)
	os.Symlink(filepath.Join(dir, "secret"), filepath.Join(dir, "a"))
	got := readArchive(t, archive(t, filepath.Join(dir, "a"), archiveOptions{}))
	if e := got["a"]; len(got) != 1 || e.typ != tar.TypeReg || e.body != "S" {
		t.Fatalf("a link as the path: %+v", got)
	}

	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	os.WriteFile(filepath.Join(tree, "f"), []byte("F"), 0o644)
	links := map[string]string{
		"sub/in":  "../f",
		"abs":     filepath.Join(dir, "secret"),
		"up":      "../secret",
		"updir":   "../outdir",
		"dotlink": ".",
		// Lexically sub/x/../f is inside, but dotlink is the tree
		// itself, so dotlink/../secret is dir/secret.
		"sub/trick": "../dotlink/../secret",
	}
	for name, target := range links {
		os.Symlink(target, filepath.Join(tree, name))
	}
	got = readArchive(t, archive(t, tree, archiveOptions{}))
	for name, target := range links {
		if e := got["tree/"+name]; e.typ != tar.TypeSymlink || e.target != target {
			t.Errorf("tree/%s: %+v, want a link to %s", name, e, target)
		}
	}
	got = readArchive(t, archive(t, tree, archiveOptions{follow: true}))
	for name, want := range map[string]entry{
		"sub/in":    {typ: tar.TypeSymlink, target: "../f"},
		"dotlink":   {typ: tar.TypeSymlink, target: "."},
		"abs":       {typ: tar.TypeReg, size: 1, body: "S"},
		"up":        {typ: tar.TypeReg, size: 1, body: "S"},
		"sub/trick": {typ: tar.TypeReg, size: 1, body: "S"},
		"updir":     {typ: tar.TypeSymlink, target: "../outdir"}, // a directory: not followed
	} {
		if e := got["tree/"+name]; e != want {
			t.Errorf("follow: tree/%s = %+v, want %+v", name, e, want)
		}
	}
}

func TestStaysInside(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "a", "b"), 0o755)
	for name, c := range map[string]struct {
		target string
		in     bool
	}{
		"a/b/up2":    {"../../x", true},
		"a/b/up3":    {"../../../x", false},
		"a/down":     {"b/c/d", true},
		"a/abs":      {"/etc", false},
		"a/dot":      {".", true},
		"self":       {".", true},
		"toroot":     {"..", false},
		"a/viaself":  {"../self/../x", false}, // self is the tree: ../x from there is outside
		"a/viaabs":   {"abs/x", false},        // through a link to an absolute path
		"a/missing":  {"nothere/../../x", true},
		"a/missing2": {"nothere/../../../x", false},
		"a/loop1":    {"loop2", false},
		"a/loop2":    {"loop1", false},
	} {
		os.Symlink(c.target, filepath.Join(root, name))
		defer func(name string, want bool) {
			if got := staysInside(root, filepath.Join(root, name)); got != want {
				t.Errorf("%s -> %s: inside %v, want %v", name, c.target, got, want)
			}
		}(name, c.in)
	}
}
