package client

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/airlock-dev/airlock/api"
)

func TestParseHost(t *testing.T) {
	for _, tc := range []struct {
		host             string
		socket, base, ws string
		wantErr          string
	}{
		{host: "unix:///run/airlock/airlock.sock", socket: "/run/airlock/airlock.sock", base: "http://airlock", ws: "ws://airlock"},
		{host: "unix:///tmp/a%20b.sock", socket: "/tmp/a b.sock", base: "http://airlock", ws: "ws://airlock"},
		{host: "http://127.0.0.1:8080", base: "http://127.0.0.1:8080", ws: "ws://127.0.0.1:8080"},
		{host: "http://localhost:8080/", base: "http://localhost:8080", ws: "ws://localhost:8080"},
		{host: "https://airlock.example.com", base: "https://airlock.example.com", ws: "wss://airlock.example.com"},
		{host: "https://example.com:8443/airlock/", base: "https://example.com:8443/airlock", ws: "wss://example.com:8443/airlock"},
		{host: "http://[::1]:7000", base: "http://[::1]:7000", ws: "ws://[::1]:7000"},
		{host: "unix://run/airlock.sock", wantErr: "must be absolute"},
		{host: "unix://", wantErr: "no socket path"},
		{host: "unix:///run/", wantErr: "no socket path"},
		{host: "tcp://127.0.0.1:8080", wantErr: `unknown scheme "tcp"`},
		{host: "ftp://example.com", wantErr: `unknown scheme "ftp"`},
		{host: "localhost:8080", wantErr: `unknown scheme "localhost"`},
		{host: "/run/airlock.sock", wantErr: "no scheme"},
		{host: "http://", wantErr: "no host name"},
		{host: "http://:8080", wantErr: "no host name"},
		{host: "http://host:99999", wantErr: "bad port"},
		{host: "http://user:pw@host:1", wantErr: "no user"},
		{host: "http://host:1/?x=1", wantErr: "no user, query"},
		{host: "http://host:1/%zz", wantErr: "not a URL"},
	} {
		t.Run(tc.host, func(t *testing.T) {
			s, err := parseHost(tc.host)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), "unix:///path/to.sock") {
					t.Errorf("err %q does not say what is wanted", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.socket != tc.socket || s.base != tc.base || s.wsBase != tc.ws {
				t.Errorf("got %+v, want socket %q base %q ws %q", s, tc.socket, tc.base, tc.ws)
			}
		})
	}
}

func TestDefaultHost(t *testing.T) {
	t.Setenv("AIRLOCK_HOST", "http://example.com:9000")
	c, err := New("", "k")
	if err != nil {
		t.Fatal(err)
	}
	if c.Host() != "http://example.com:9000" || c.Socket() != "" || c.base != "http://example.com:9000" {
		t.Errorf("New(\"\") with AIRLOCK_HOST: host %q socket %q base %q", c.Host(), c.Socket(), c.base)
	}
	t.Setenv("AIRLOCK_API_KEY", "secret")
	if c, err = FromEnv(); err != nil || c.apiKey != "secret" || c.Host() != "http://example.com:9000" {
		t.Errorf("FromEnv: %v, key %q", err, c.apiKey)
	}

	t.Setenv("AIRLOCK_HOST", "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	h, err := DefaultHost()
	if os.Geteuid() == 0 {
		if err != nil || h != "unix:///run/airlock/airlock.sock" {
			t.Errorf("as root: %q, %v", h, err)
		}
		return
	}
	if err != nil || h != "unix:///run/user/1000/airlock.sock" {
		t.Errorf("with XDG_RUNTIME_DIR: %q, %v", h, err)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	if _, err := New("", ""); err == nil || !strings.Contains(err.Error(), "AIRLOCK_HOST") {
		t.Errorf("no XDG_RUNTIME_DIR: err = %v", err)
	}
}

func TestNewBadHost(t *testing.T) {
	if _, err := New("tcp://x:1", ""); err == nil {
		t.Fatal("New accepted tcp://")
	}
}

func TestErrorFromBody(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		status     int
		retryAfter string
		body       string
		want       Error
		is         []error
		isNot      []error
		text       string
	}{
		{
			name: "not found", status: 404,
			body: `{"error":{"code":"not_found","message":"sandbox \"sb-0123456789abcdef\" not found"}}` + "\n",
			want: Error{Status: 404, Code: api.CodeNotFound, Message: `sandbox "sb-0123456789abcdef" not found`},
			is:   []error{ErrNotFound}, isNot: []error{ErrConflict, ErrInvalid},
			text: `airlock: sandbox "sb-0123456789abcdef" not found (not_found, HTTP 404)`,
		},
		{
			name: "exists is a conflict", status: 409,
			body: `{"error":{"code":"already_exists","message":"key exists"}}`,
			want: Error{Status: 409, Code: api.CodeExists, Message: "key exists"},
			is:   []error{ErrConflict}, isNot: []error{ErrNotFound},
		},
		{
			name: "conflict", status: 409,
			body: `{"error":{"code":"failed_precondition","message":"sandbox is paused"}}`,
			want: Error{Status: 409, Code: api.CodeConflict, Message: "sandbox is paused"},
			is:   []error{ErrConflict},
		},
		{
			name: "exhausted with seconds", status: 429, retryAfter: "7",
			body: `{"error":{"code":"resource_exhausted","message":"too many sandboxes"}}`,
			want: Error{Status: 429, Code: api.CodeExhausted, Message: "too many sandboxes", RetryAfter: 7 * time.Second},
			is:   []error{ErrExhausted},
		},
		{
			name: "unavailable with date", status: 503, retryAfter: now.Add(90 * time.Second).Format(http.TimeFormat),
			body: `{"error":{"code":"unavailable","message":"draining"}}`,
			want: Error{Status: 503, Code: api.CodeUnavailable, Message: "draining", RetryAfter: 90 * time.Second},
			is:   []error{ErrUnavailable},
		},
		{
			name: "plain text 404", status: 404, body: "404 page not found\n",
			want: Error{Status: 404, Code: api.CodeNotFound, Message: "Not Found"},
			is:   []error{ErrNotFound},
			text: "airlock: Not Found (not_found, HTTP 404)",
		},
		{
			name: "html 502 from a proxy", status: 502, body: "<html>bad gateway</html>",
			want:  Error{Status: 502, Code: api.CodeInternal, Message: "Bad Gateway"},
			isNot: []error{ErrUnavailable, ErrNotFound},
		},
		{
			name: "empty 401", status: 401,
			want: Error{Status: 401, Code: api.CodeUnauthorized, Message: "Unauthorized"},
			is:   []error{ErrUnauthorized},
		},
		{
			name: "forbidden", status: 403, body: `{"error":{"code":"permission_denied","message":"keys only over the unix socket"}}`,
			want: Error{Status: 403, Code: api.CodeForbidden, Message: "keys only over the unix socket"},
			is:   []error{ErrForbidden},
		},
		{
			name: "too large", status: 413, body: `{"error":{"code":"too_large","message":"file too large"}}`,
			want: Error{Status: 413, Code: api.CodeTooLarge, Message: "file too large"},
			is:   []error{ErrTooLarge},
		},
		{
			name: "invalid", status: 400, body: `{"error":{"code":"invalid_argument","message":"bad label"}}`,
			want: Error{Status: 400, Code: api.CodeInvalid, Message: "bad label"},
			is:   []error{ErrInvalid},
		},
		{
			name: "JSON but not an error", status: 500, body: `{"x":1}`,
			want: Error{Status: 500, Code: api.CodeInternal, Message: "Internal Server Error"},
		},
		{
			name: "odd status", status: 599,
			want: Error{Status: 599, Code: api.CodeInternal, Message: "HTTP status 599"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := errorFromBody(tc.status, tc.retryAfter, []byte(tc.body), now)
			if *e != tc.want {
				t.Errorf("got %+v, want %+v", *e, tc.want)
			}
			var err error = fmt.Errorf("wrapped: %w", e)
			for _, s := range tc.is {
				if !errors.Is(err, s) {
					t.Errorf("errors.Is(%v, %v) = false", err, s)
				}
			}
			for _, s := range tc.isNot {
				if errors.Is(err, s) {
					t.Errorf("errors.Is(%v, %v) = true", err, s)
				}
			}
			if tc.text != "" && e.Error() != tc.text {
				t.Errorf("Error() = %q, want %q", e.Error(), tc.text)
			}
		})
	}
}

func TestEmptyIDs(t *testing.T) {
	c, err := New("unix:///nonexistent/airlock.sock", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.GetSandbox(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("GetSandbox(\"\") = %v", err)
	}
	if err := c.Signal(ctx, "sb-0123456789abcdef", "", "TERM"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Signal with no pid = %v", err)
	}
	if _, err := c.Stat(ctx, "sb-0123456789abcdef", ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Stat(\"\") = %v", err)
	}
	// The daemon is not there: the transport's error, which FollowOutput
	// would retry.
	err = c.Health(ctx)
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !retryable(err) {
		t.Errorf("Health without a daemon = %v", err)
	}
}

func TestPathEscaping(t *testing.T) {
	p, err := processPath("sb-0/../x", "p 1", "/output")
	if err != nil {
		t.Fatal(err)
	}
	if want := "/v1/sandboxes/sb-0%2F..%2Fx/processes/p%201/output"; p != want {
		t.Errorf("processPath = %q, want %q", p, want)
	}
	c, _ := New("unix:///x.sock", "")
	req, err := c.filesRequest(context.Background(), "GET", "sb-1", "/files", "/a b/c&d=e?", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := req.URL.Query().Get("path"); got != "/a b/c&d=e?" {
		t.Errorf("path query = %q", got)
	}
	q := ListOptions{States: []string{"running", "paused"}, Labels: map[string]string{"b": "x=y", "a": "1&2"}, Limit: 5, Cursor: "c/1"}.query()
	if got, want := q.Encode(), "cursor=c%2F1&label=a%3D1%262&label=b%3Dx%3Dy&limit=5&state=running&state=paused"; got != want {
		t.Errorf("list query = %q, want %q", got, want)
	}
}

// events collects a stream's events until its error.
func events(s *OutputStream) ([]api.OutputEvent, []string, error) {
	var evs []api.OutputEvent
	var cursors []string
	for {
		ev, err := s.Next()
		if err != nil {
			return evs, cursors, err
		}
		evs = append(evs, ev)
		cursors = append(cursors, s.Cursor())
	}
}

func ptr(i int) *int { return &i }

func TestNDJSON(t *testing.T) {
	full := `{"kind":"stdout","stream":"stdout","offset":0,"data":"aGVsbG8K","cursor":"6.0"}
{"kind":"stderr","stream":"stderr","offset":0,"data":"b29wcw==","cursor":"6.4"}

{"kind":"lost","stream":"stdout","offset":100,"bytes":94,"cursor":"100.4"}` + "\r\n" +
		`{"kind":"exit","offset":0,"exit_code":3,"cursor":"100.4"}
{"kind":"stdout","offset":0,"cursor":"never read"}
`
	want := []api.OutputEvent{
		{Kind: "stdout", Stream: "stdout", Data: []byte("hello\n"), Cursor: "6.0"},
		{Kind: "stderr", Stream: "stderr", Data: []byte("oops"), Cursor: "6.4"},
		{Kind: "lost", Stream: "stdout", Offset: 100, Bytes: 94, Cursor: "100.4"},
		{Kind: "exit", ExitCode: ptr(3), Cursor: "100.4"},
	}
	for name, r := range map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
	} {
		t.Run(name, func(t *testing.T) {
			s := newOutputStream(io.NopCloser(r(strings.NewReader(full))), false, "start")
			if s.Cursor() != "start" {
				t.Errorf("initial cursor %q", s.Cursor())
			}
			got, cursors, err := events(s)
			if err != io.EOF {
				t.Fatalf("err = %v, want io.EOF after the exit event", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
			if !reflect.DeepEqual(cursors, []string{"6.0", "6.4", "100.4", "100.4"}) {
				t.Errorf("cursors %q", cursors)
			}
			if _, err := s.Next(); err != io.EOF {
				t.Errorf("Next after exit = %v", err)
			}
		})
	}

	for _, tc := range []struct {
		name, in string
		n        int
		err      error
		errText  string
	}{
		{name: "clean end without exit", in: `{"kind":"stdout","offset":0,"data":"YQ==","cursor":"1.0"}` + "\n", n: 1, err: io.EOF},
		{name: "empty", in: "", err: io.EOF},
		{name: "truncated last line", in: `{"kind":"stdout","offset":0,"data":"YQ==","cursor":"1.0"}` + "\n" + `{"kind":"stdout","off`, n: 1, err: io.ErrUnexpectedEOF},
		{name: "last line without newline", in: `{"kind":"exit","offset":0,"cursor":"1.0"}`, err: io.ErrUnexpectedEOF},
		{name: "error in stream", in: `{"error":{"code":"unavailable","message":"daemon shutting down"}}` + "\n", err: ErrUnavailable},
		{name: "not JSON", in: "hello\n", errText: "bad event"},
		{name: "no kind", in: "{}\n", errText: "without a kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := events(newOutputStream(io.NopCloser(strings.NewReader(tc.in)), false, ""))
			if len(got) != tc.n {
				t.Errorf("%d events, want %d", len(got), tc.n)
			}
			if tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("err = %v, want %v", err, tc.err)
			}
			if tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText)) {
				t.Errorf("err = %v, want one saying %q", err, tc.errText)
			}
		})
	}
}

func TestSSE(t *testing.T) {
	full := ": a comment, then the retry hint\nretry: 1000\n\n" +
		"id: 6.0\nevent: stdout\ndata: {\"kind\":\"stdout\",\"stream\":\"stdout\",\"offset\":0,\"data\":\"aGVsbG8K\",\"cursor\":\"6.0\"}\n\n" +
		// Multi-line data, CRLF lines, no cursor in the JSON: the id is it.
		"id: 6.4\r\ndata: {\"kind\":\"stderr\",\r\ndata:\"stream\":\"stderr\",\r\ndata:  \"offset\":0,\"data\":\"b29wcw==\"}\r\n\r\n" +
		// Lone CRs end lines too.
		"id: 100.4\rdata: {\"kind\":\"lost\",\"stream\":\"stdout\",\"offset\":100,\"bytes\":94,\"cursor\":\"100.4\"}\r\r" +
		": keepalive\n\n" +
		"data: {\"kind\":\"exit\",\"offset\":0,\"signal\":9,\"cursor\":\"100.4\"}\n\n" +
		"data: {\"kind\":\"stdout\",\"offset\":0,\"cursor\":\"never read\"}\n\n"
	want := []api.OutputEvent{
		{Kind: "stdout", Stream: "stdout", Data: []byte("hello\n"), Cursor: "6.0"},
		{Kind: "stderr", Stream: "stderr", Data: []byte("oops"), Cursor: "6.4"},
		{Kind: "lost", Stream: "stdout", Offset: 100, Bytes: 94, Cursor: "100.4"},
		{Kind: "exit", Signal: 9, Cursor: "100.4"},
	}
	for name, r := range map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
	} {
		t.Run(name, func(t *testing.T) {
			got, _, err := events(newOutputStream(io.NopCloser(r(strings.NewReader(full))), true, ""))
			if err != io.EOF {
				t.Fatalf("err = %v, want io.EOF", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
		})
	}

	for _, tc := range []struct {
		name, in string
		n        int
		err      error
	}{
		{name: "clean end", in: "data: {\"kind\":\"stdout\",\"offset\":0,\"cursor\":\"1.0\"}\n\n: bye\n", n: 1, err: io.EOF},
		{name: "event without its blank line", in: "data: {\"kind\":\"stdout\",\"offset\":0,\"cursor\":\"1.0\"}\n\ndata: {\"kind\":\"exit\",\"offset\":0,\"cursor\":\"1.0\"}\n", n: 1, err: io.ErrUnexpectedEOF},
		{name: "truncated line", in: "data: {\"kind\":\"stdo", err: io.ErrUnexpectedEOF},
		{name: "only comments", in: ":x\n:y\n\n", err: io.EOF},
		{name: "error event", in: "event: error\ndata: {\"error\":{\"code\":\"not_found\",\"message\":\"no such process\"}}\n\n", err: ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := events(newOutputStream(io.NopCloser(strings.NewReader(tc.in)), true, ""))
			if len(got) != tc.n || !errors.Is(err, tc.err) {
				t.Errorf("%d events, err %v; want %d, %v", len(got), err, tc.n, tc.err)
			}
		})
	}
}

// A command that cannot start matches its own sentinel and, being a 400,
// ErrInvalid; an invalid argument matches neither refinement.
func TestCommandErrors(t *testing.T) {
	nf := errorFromBody(400, "", []byte(`{"error":{"code":"command_not_found","message":"x: command not found"}}`), time.Now())
	ne := errorFromBody(400, "", []byte(`{"error":{"code":"not_executable","message":"x: not executable"}}`), time.Now())
	inv := errorFromBody(400, "", []byte(`{"error":{"code":"invalid_argument","message":"bad"}}`), time.Now())
	for _, c := range []struct {
		err    error
		target error
		want   bool
	}{
		{nf, ErrCommandNotFound, true}, {nf, ErrInvalid, true}, {nf, ErrNotExecutable, false}, {nf, ErrNotFound, false},
		{ne, ErrNotExecutable, true}, {ne, ErrInvalid, true}, {ne, ErrCommandNotFound, false},
		{inv, ErrInvalid, true}, {inv, ErrCommandNotFound, false}, {inv, ErrNotExecutable, false},
	} {
		if got := errors.Is(c.err, c.target); got != c.want {
			t.Errorf("errors.Is(%v, %v) = %v", c.err, c.target, got)
		}
	}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{io.ErrUnexpectedEOF, true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{&Error{Status: 503, Code: api.CodeUnavailable}, true},
		{&Error{Status: 404, Code: api.CodeNotFound}, false},
		{&net.OpError{Op: "dial", Net: "unix", Err: errors.New("connection refused")}, true},
		{errors.New("airlock: output stream: bad event"), false},
		{context.Canceled, false},
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("retryable(%v) = %v", tc.err, got)
		}
	}
}

// tree makes a small tree with a symlink under dir/src.
func tree(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "src")
	for _, d := range []string{"src/sub/deep", "src/empty"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{"src/a.txt": "alpha\n", "src/sub/b.sh": "#!/bin/sh\necho b\n", "src/sub/deep/c": ""}
	for n, content := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "sub/b.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../a.txt", filepath.Join(src, "sub/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "empty"), 0o555); err != nil {
		t.Fatal(err)
	}
	return src
}

// snapshot describes a tree: path -> type, mode, content or target.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			m[rel] = "link " + target
		case fi.IsDir():
			m[rel] = fmt.Sprintf("dir %o", fi.Mode().Perm())
		default:
			b, _ := os.ReadFile(p)
			m[rel] = fmt.Sprintf("file %o %q", fi.Mode().Perm(), b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTarRoundTrip(t *testing.T) {
	dir := t.TempDir()
	src := tree(t, dir)
	var buf bytes.Buffer
	if err := TarDir(&buf, src); err != nil {
		t.Fatal(err)
	}
	// The entries are under the base name, links stored as links.
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	names := map[string]byte{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[hdr.Name] = hdr.Typeflag
	}
	for n, typ := range map[string]byte{"src/": tar.TypeDir, "src/a.txt": tar.TypeReg, "src/sub/link": tar.TypeSymlink, "src/abs": tar.TypeSymlink, "src/sub/deep/c": tar.TypeReg} {
		if names[n] != typ {
			t.Errorf("entry %q: type %q, want %q (entries: %v)", n, names[n], typ, names)
		}
	}

	dst := filepath.Join(dir, "dst")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	x, err := UntarTo(dst, bytes.NewReader(buf.Bytes()), DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Everything but the link to /etc/passwd, which is listed instead.
	want := snapshot(t, src)
	delete(want, "abs")
	if got := snapshot(t, filepath.Join(dst, "src")); !reflect.DeepEqual(got, want) {
		t.Errorf("extracted tree differs:\n got %v\nwant %v", got, want)
	}
	if want := []SkippedLink{{filepath.Join(dst, "src/abs"), "/etc/passwd"}}; !reflect.DeepEqual(x.SkippedLinks, want) {
		t.Errorf("skipped %v, want %v", x.SkippedLinks, want)
	}
	// Again, over the first copy: files and links are replaced.
	if _, err := UntarTo(dst, bytes.NewReader(buf.Bytes()), DownloadOptions{}); err != nil {
		t.Fatalf("second extraction: %v", err)
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 1 {
		t.Errorf("dst holds %v, want src alone (no temporary directory left)", ents)
	}

	// A single file, and a symlink given as src, which is not followed:
	// a link alone leads out of itself, so it is left out.
	buf.Reset()
	if err := TarDir(&buf, filepath.Join(src, "sub/link")); err != nil {
		t.Fatal(err)
	}
	dst2 := t.TempDir()
	x, err = UntarTo(dst2, &buf, DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dst2, "link")); !errors.Is(err, fs.ErrNotExist) || len(x.SkippedLinks) != 1 || x.SkippedLinks[0].Target != "../a.txt" {
		t.Errorf("top-level link: %v, skipped %v", err, x.SkippedLinks)
	}
	os.Chmod(filepath.Join(dst, "src/empty"), 0o755) // let t.TempDir clean up
}

// tarOf builds a tar stream of the given headers; a regular file's content
// is its name.
func tarOf(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Name))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(h.Name))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestUntarRefuses(t *testing.T) {
	outside := t.TempDir()
	for _, tc := range []struct {
		name string
		hdrs []*tar.Header
		want string
	}{
		{"dotdot", []*tar.Header{{Name: "../x", Typeflag: tar.TypeReg}}, `".." refused`},
		{"dotdot inside", []*tar.Header{{Name: "a/../../x", Typeflag: tar.TypeReg}}, `".." refused`},
		{"dotdot dir", []*tar.Header{{Name: "a/b/../", Typeflag: tar.TypeDir}}, `".." refused`},
		{"absolute", []*tar.Header{{Name: "/etc/x", Typeflag: tar.TypeReg}}, "absolute"},
		{"double slash", []*tar.Header{{Name: "//etc/x", Typeflag: tar.TypeReg}}, "absolute"},
		{"empty name", []*tar.Header{{Name: "", Typeflag: tar.TypeDir}}, "empty name"},
		{"symlink out then file", []*tar.Header{
			{Name: "out", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "out/x", Typeflag: tar.TypeReg},
		}, "nothing is written through"},
		{"relative symlink out then file", []*tar.Header{
			{Name: "d/", Typeflag: tar.TypeDir},
			{Name: "d/up", Typeflag: tar.TypeSymlink, Linkname: "../../.."},
			{Name: "d/up/tmp/x", Typeflag: tar.TypeReg},
		}, "nothing is written through"},
		{"symlink out then dir", []*tar.Header{
			{Name: "out", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "out/sub/", Typeflag: tar.TypeDir},
		}, "nothing is written through"},
		{"symlink in then file", []*tar.Header{
			{Name: "t/dir/", Typeflag: tar.TypeDir},
			{Name: "t/in", Typeflag: tar.TypeSymlink, Linkname: "dir"},
			{Name: "t/in/x", Typeflag: tar.TypeReg},
		}, "nothing is written through"},
		{"hard link", []*tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}, "unsupported entry type"},
		{"device", []*tar.Header{{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}, "unsupported entry type"},
		{"fifo", []*tar.Header{{Name: "f", Typeflag: tar.TypeFifo}}, "unsupported entry type"},
		{"file as root", []*tar.Header{{Name: ".", Typeflag: tar.TypeReg}}, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := t.TempDir()
			_, err := UntarTo(dst, bytes.NewReader(tarOf(t, tc.hdrs...)), DownloadOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "airlock: untar: ") {
				t.Errorf("err %q does not say where it comes from", err)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("something was written outside: %v", ents)
			}
			if ents, _ := os.ReadDir(dst); len(ents) != 0 {
				t.Fatalf("a failed extraction left %v in dst", ents)
			}
		})
	}
	// A NUL in a name: archive/tar refuses to write it, so forge it.
	if _, err := entryName("a\x00b"); err == nil {
		t.Error("entryName accepted a NUL")
	}
}

func TestUntarOddNames(t *testing.T) {
	dst := t.TempDir()
	_, err := UntarTo(dst, bytes.NewReader(tarOf(t,
		&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "./a/./b", Typeflag: tar.TypeReg},
		&tar.Header{Name: "dir//x", Typeflag: tar.TypeReg},
		&tar.Header{Name: "..x", Typeflag: tar.TypeReg},
		&tar.Header{Name: "x..", Typeflag: tar.TypeReg},
		&tar.Header{Name: "sp ace\tand\\back", Typeflag: tar.TypeReg},
		&tar.Header{Name: "setuid", Typeflag: tar.TypeReg, Mode: 0o4755},
	)), DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a/b", "dir/x", "..x", "x..", "sp ace\tand\\back"} {
		if b, err := os.ReadFile(filepath.Join(dst, n)); err != nil || len(b) == 0 {
			t.Errorf("%s: %q, %v", n, b, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dst, "setuid")); err != nil || fi.Mode()&(fs.ModeSetuid) != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("setuid: %v, %v (want the mode masked to 0755)", fi.Mode(), err)
	}
}

// The SDK must not depend on airlock's internal packages.
func TestNoInternalDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := []string{"github.com/airlock-dev/airlock/client", "github.com/airlock-dev/airlock/api", "github.com/coder/websocket"}
	for _, dep := range strings.Fields(string(out)) {
		if first, _, _ := strings.Cut(dep, "/"); !strings.Contains(first, ".") {
			continue // the standard library
		}
		ok := false
		for _, a := range allowed {
			if dep == a || strings.HasPrefix(dep, a+"/") {
				ok = true
			}
		}
		if !ok || strings.Contains(dep, "airlock/internal") {
			t.Errorf("package client depends on %s", dep)
		}
	}
}
