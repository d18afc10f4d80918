//go:build linux

package serve

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/client"
)

// cutReader yields n bytes, then fails (a client whose source broke).
type cutReader struct{ n int }

func (c *cutReader) Read(p []byte) (int, error) {
	if c.n == 0 {
		return 0, errors.New("the source broke")
	}
	k := min(len(p), c.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	c.n -= k
	return k, nil
}

// TestUploadCutKeepsFile: an upload that does not arrive whole, because it
// is over max_upload or because its source fails half-way, never replaces
// the file; a complete one does (the control).
func TestUploadCutKeepsFile(t *testing.T) {
	d := startDaemon(t, "max_upload: 1M\n")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	read := func() string {
		t.Helper()
		rc, _, err := d.c.ReadFile(ctx, sb.ID, "f.txt", client.DownloadOptions{})
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}
	writes := func() int { return strings.Count(d.Logs(), "op=writeFile") }
	put := func(r io.Reader) error { return d.c.WriteFile(ctx, sb.ID, "f.txt", 0o644, r) }

	// Control: complete uploads replace the file.
	if err := put(strings.NewReader("original")); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("y"), 512<<10)
	if err := put(bytes.NewReader(big)); err != nil {
		t.Fatalf("a complete 512 KiB upload: %v", err)
	}
	if got := read(); got != string(big) {
		t.Fatalf("after a complete upload: %d bytes, want %d", len(got), len(big))
	}
	if err := put(strings.NewReader("original")); err != nil {
		t.Fatal(err)
	}

	// Over max_upload: 413, and the first MiB did not replace the file.
	err := put(bytes.NewReader(make([]byte, 3<<20)))
	wantCode(t, "an upload over max_upload", err, 413)
	if got := read(); got != "original" {
		t.Fatalf("after an upload over max_upload: %d bytes %.20q, want the original", len(got), got)
	}

	// A source that fails after 300 KiB: the request fails, and once the
	// daemon has handled it the file is still the original one.
	n := writes()
	if err := put(&cutReader{n: 300 << 10}); err == nil {
		t.Fatal("an upload whose source failed succeeded")
	}
	deadline := time.Now().Add(30 * time.Second)
	for writes() <= n {
		if time.Now().After(deadline) {
			t.Fatal("the daemon never finished the cut request")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := read(); got != "original" {
		t.Fatalf("after an upload whose source failed: %d bytes, want the original", len(got))
	}
	// Nothing half-written is left next to it.
	if out := d.sh(t, sb.ID, "ls -A /workspace"); out != "f.txt\n" {
		t.Errorf("workspace after cut uploads: %q", out)
	}
}
