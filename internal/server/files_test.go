package server

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/manager"
)

// tarBytes builds a tar stream; a regular file's content is its name
// repeated to its Size (or absent when noData).
func tarBytes(t *testing.T, noData bool, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if noData {
			return buf.Bytes()
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte{'x'}, int(h.Size)))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// TestSendArchive: the archive stream of a sandbox, which may be anything,
// goes to a real SDK client over HTTP only as far as it is sound and under
// max_size; a fault after the status arrives as the error of the last Read
// (the trailer) and the bytes that came are no complete tar. Control: a
// sound archive under the limit comes through byte for byte.
func TestSendArchive(t *testing.T) {
	sound := tarBytes(t, false,
		&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Size: 3000},
		&tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "f"},
	)
	var sparse []byte
	if gnutar, err := exec.LookPath("tar"); err == nil {
		dir := t.TempDir()
		p := filepath.Join(dir, "s")
		if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Truncate(p, 64<<20)
		sparse, err = exec.Command(gnutar, "-C", dir, "--sparse", "--format=posix", "-cf", "-", "s").Output()
		if err != nil {
			t.Fatalf("tar: %v", err)
		}
	}
	type tcase struct {
		name   string
		stream []byte
		max    int64
		code   string // "" for a sound answer
	}
	cases := []tcase{
		{"sound", sound, 1000000, ""},
		{"sound with garbage after its end", append(append([]byte{}, sound...), bytes.Repeat([]byte{7}, 5000)...), 1000000, ""},
		{"over max_size", sound, 4096, api.CodeTooLarge},
		{"over max_size at a block", sound, 2048, api.CodeTooLarge},
		{"a file larger than max_size, its data not sent", tarBytes(t, true, &tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 1 << 40}), 1000000, api.CodeTooLarge},
		{"a FIFO", tarBytes(t, false, &tar.Header{Name: "p", Typeflag: tar.TypeFifo}), 1000000, api.CodeInternal},
		{"a device", tarBytes(t, false, &tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}), 1000000, api.CodeInternal},
		{"a hard link", tarBytes(t, false, &tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}), 1000000, api.CodeInternal},
		{"cut short", sound[:1536], 1000000, api.CodeInternal},
	}
	if sparse != nil {
		cases = append(cases,
			tcase{"sparse: its holes count", sparse, 1 << 20, api.CodeTooLarge},
			tcase{"sparse under the limit", sparse, 100 << 20, ""})
	}
	s := &Server{met: manager.NewMetrics()}
	var current []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		max, err := downloadMax(r)
		if err != nil {
			s.writeError(w, err)
			return
		}
		s.sendArchive(w, "/workspace/x", bytes.NewReader(current), max)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			current = tc.stream
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			max := tc.max
			rc, err := c.Download(ctx, "sb-0123456789abcdef", "x", client.DownloadOptions{MaxSize: max})
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if tc.code == "" {
				// The archive, up to its end: what follows it is dropped.
				if err != nil || !bytes.HasPrefix(tc.stream, got) {
					t.Fatalf("%d bytes, %v; want the archive", len(got), err)
				}
				br := bytes.NewReader(got)
				tr := tar.NewReader(br)
				for {
					_, err := tr.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatalf("the answer is no whole tar: %v", err)
					}
				}
				if br.Len() != 0 {
					t.Fatalf("%d bytes after the archive's end were sent", br.Len())
				}
				return
			}
			var e *client.Error
			if !errors.As(err, &e) || e.Code != tc.code || e.Status != 0 || e.Message == "" {
				t.Fatalf("err = %v, want a stream error of code %s", err, tc.code)
			}
			if len(got)%512 == 0 || int64(len(got)) > max+1 {
				t.Fatalf("%d bytes came (max %d): want a cut short of a block, at most max", len(got), max)
			}
			// No tar reader takes it for a complete archive.
			tr := tar.NewReader(bytes.NewReader(got))
			for {
				_, err := tr.Next()
				if err == io.EOF {
					t.Fatal("a tar reader read the cut stream to its end")
				}
				if err != nil {
					break
				}
				if _, err := io.Copy(io.Discard, tr); err != nil {
					break
				}
			}
		})
	}
	// max_size itself.
	for _, q := range []string{"abc", "0", "-1", "1.5"} {
		resp, err := http.Get(srv.URL + "/?max_size=" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("max_size=%s: %d, want 400", q, resp.StatusCode)
		}
	}
}
