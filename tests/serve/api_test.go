//go:build linux

package serve

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// TestFiles covers every file call and the API probes A1 (traversal) and A3
// (symlinked parent): the host's files are the oracle.
func TestFiles(t *testing.T) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	// Write (atomic, parents made), read, stat, list, mkdir, rename, remove.
	if err := d.c.WriteFile(ctx, sb.ID, "dir/a.txt", 0o640, strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	rc, fi, err := d.c.ReadFile(ctx, sb.ID, "/workspace/dir/a.txt", client.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello" || fi.Size != 5 || fi.Mode != 0o640 {
		t.Fatalf("read: %q %+v", b, fi)
	}
	st, err := d.c.Stat(ctx, sb.ID, "dir")
	if err != nil || !st.Dir {
		t.Fatalf("stat: %+v %v", st, err)
	}
	if err := d.c.Mkdir(ctx, sb.ID, "x/y/z", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Rename(ctx, sb.ID, "dir/a.txt", "x/y/z/b.txt"); err != nil {
		t.Fatal(err)
	}
	list, err := d.c.List(ctx, sb.ID, "x/y/z")
	if err != nil || len(list) != 1 || list[0].Name != "b.txt" || list[0].Size != 5 {
		t.Fatalf("list: %+v %v", list, err)
	}
	err = d.c.Remove(ctx, sb.ID, "x", false)
	wantCode(t, "remove a non-empty dir without recursive", err, http.StatusConflict)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != api.CodeConflict || !strings.Contains(ce.Message, "not empty") {
		t.Errorf("remove a non-empty dir: %v, want %s saying the directory is not empty", err, api.CodeConflict)
	}
	if err := d.c.Remove(ctx, sb.ID, "x", true); err != nil {
		t.Fatal(err)
	}
	_, err = d.c.Stat(ctx, sb.ID, "x")
	wantCode(t, "stat removed", err, http.StatusNotFound)
	// A large file streams through (8 MiB, not buffered whole).
	big := bytes.Repeat([]byte("0123456789abcdef"), 512<<10)
	if err := d.c.WriteFile(ctx, sb.ID, "big", 0o644, bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	if out := d.sh(t, sb.ID, "wc -c < big"); strings.TrimSpace(out) != fmt.Sprint(len(big)) {
		t.Fatalf("big file: %q", out)
	}
	// Archives: upload a tree, download it back.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for _, f := range []struct{ name, body string }{{"t/one", "1"}, {"t/sub/two", "22"}} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(f.body))
	}
	tw.Close()
	if err := d.c.Upload(ctx, sb.ID, "/workspace/up", &tb); err != nil {
		t.Fatal(err)
	}
	if out := d.sh(t, sb.ID, "cat up/t/one up/t/sub/two"); out != "122" {
		t.Fatalf("uploaded: %q", out)
	}
	rc, err = d.c.Download(ctx, sb.ID, "up", client.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(rc)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names[strings.TrimSuffix(h.Name, "/")] = true
	}
	rc.Close()
	if !names["up/t/sub/two"] && !names["t/sub/two"] {
		t.Fatalf("download: %v", names)
	}

	// A1 traversal: nothing lands on the host.
	canary := "/etc/cron.d/airlock-canary"
	os.Remove(canary)
	for _, p := range []string{"../../etc/cron.d/airlock-canary", "/etc/cron.d/airlock-canary", "%2e%2e/%2e%2e/etc/cron.d/airlock-canary"} {
		err := d.c.WriteFile(ctx, sb.ID, p, 0o644, strings.NewReader("* * * * * root touch /tmp/pwned\n"))
		if err != nil {
			var e *client.Error
			if !asClientError(err, &e) || e.Status >= 500 {
				t.Fatalf("write %q: want success inside the sandbox or a 4xx, got %v", p, err)
			}
		}
		if exists(canary) {
			t.Fatalf("write %q reached the host's %s", p, canary)
		}
	}
	// Control: the sandbox's own /etc/cron.d got it (the write is confined,
	// not dropped).
	d.sh(t, sb.ID, "test -f /etc/cron.d/airlock-canary")
	for name, p := range map[string]string{"NUL": "x\x00y", "4096-byte name": strings.Repeat("a", 4097)} {
		err := d.c.WriteFile(ctx, sb.ID, p, 0o644, strings.NewReader("x"))
		if err == nil {
			t.Fatalf("%s: accepted", name)
		}
		var e *client.Error
		if !asClientError(err, &e) || e.Status >= 500 {
			t.Fatalf("%s: want a 4xx, got %v", name, err)
		}
	}
	// Upload traversal in tar names: refused, nothing outside.
	for _, name := range []string{"../../../etc/cron.d/airlock-canary", "/etc/cron.d/airlock-canary"} {
		var tb bytes.Buffer
		tw := tar.NewWriter(&tb)
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
		tw.Write([]byte("x"))
		tw.Close()
		err := d.c.Upload(ctx, sb.ID, "/workspace/up", &tb)
		wantCode(t, "tar entry "+name, err, http.StatusBadRequest)
		if exists(canary) {
			t.Fatalf("tar entry %q reached the host", name)
		}
	}
	// A3 symlinked parent: inside the sandbox's own /etc, never the host's.
	d.sh(t, sb.ID, "ln -s /etc /workspace/d")
	if err := d.c.WriteFile(ctx, sb.ID, "d/cron.d/airlock-canary2", 0o644, strings.NewReader("x")); err == nil {
		d.sh(t, sb.ID, "test -f /etc/cron.d/airlock-canary2")
	}
	if exists("/etc/cron.d/airlock-canary2") {
		t.Fatal("symlinked parent reached the host's /etc")
	}
}

func asClientError(err error, e **client.Error) bool {
	ce, ok := err.(*client.Error)
	if !ok {
		return false
	}
	*e = ce
	return true
}

// TestBadRequests: ids, routes, methods, bodies and policies the API
// refuses, each with a clear 4xx and the JSON error shape.
func TestBadRequests(t *testing.T) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/v1/sandboxes/sb-zzzz", "", 404},
		{"GET", "/v1/sandboxes/sb-0123456789abcdef", "", 404},
		{"GET", "/v1/sandboxes/..%2f..%2fetc", "", 404},
		{"GET", "/v1/sandboxes/" + sb.ID + "/processes/p0", "", 404},
		{"GET", "/v1/sandboxes/" + sb.ID + "/processes/1", "", 404},
		{"GET", "/v1/nope", "", 404},
		{"PATCH", "/v1/sandboxes", "", 405},
		{"POST", "/v1/sandboxes", "{", 400},
		{"POST", "/v1/sandboxes", `{"labelz":{}}`, 400},
		{"POST", "/v1/sandboxes", `{"timeout_seconds":-1}`, 400},
		{"POST", "/v1/sandboxes", `{"timeout_seconds":1e12}`, 400},
		{"POST", "/v1/sandboxes", `{"timeout_seconds":1e-9}`, 400},     // ends before it can be used; 1 s works (TestTTLAndIdle)
		{"POST", "/v1/sandboxes", `{"idle_timeout_seconds":0.5}`, 400}, // likewise
		{"POST", "/v1/sandboxes", `{"image":"nope"}`, 400},
		{"POST", "/v1/sandboxes", `{"policy_name":"nope"}`, 400},
		{"POST", "/v1/sandboxes", `{"resources":{"memory":"lots"}}`, 400},
		{"POST", "/v1/sandboxes", `{"labels":{"a=b":"c"}}`, 400},
		{"POST", "/v1/sandboxes", `{"files":[{"path":"","content":""}]}`, 400},
		{"POST", "/v1/sandboxes", `{"policy":"filesystem:\n  writable: [/etc]\n"}`, 400},
		{"POST", "/v1/sandboxes", `{"policy":"workspace: /root\n"}`, 400},
		{"POST", "/v1/sandboxes", `{"policy":"environment:\n  pass: [HOME]\n"}`, 400},
		{"POST", "/v1/sandboxes", `{"policy":"nonsense: 1\n"}`, 400},
		{"POST", "/v1/sandboxes", `{"runtime":"vm"}`, 400},
		{"POST", "/v1/sandboxes", `{"runtime":"firecracker"}`, 400},
		{"POST", "/v1/sandboxes", `{"policy":"runtime: firecracker\n"}`, 400},
		{"POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"argv":"ls"}`, 400},
		{"GET", "/v1/sandboxes?limit=0", "", 400},
		{"GET", "/v1/sandboxes?state=zombie", "", 400},
		{"GET", "/v1/sandboxes?cursor=bogus", "", 400},
		{"GET", "/v1/sandboxes/" + sb.ID + "/files?path=", "", 400},
	} {
		resp, body := d.rawRequest(t, c.method, c.path, strings.NewReader(c.body), map[string]string{"Content-Type": "application/json"})
		var e api.Error
		if resp.StatusCode != c.status || json.Unmarshal(body, &e) != nil || e.Err.Code == "" || e.Err.Message == "" {
			t.Errorf("%s %s %q: got %d %s, want %d with a JSON error", c.method, c.path, c.body, resp.StatusCode, body, c.status)
		}
	}
	// Oversized bodies: 413.
	resp, _ := d.rawRequest(t, "POST", "/v1/sandboxes", io.MultiReader(strings.NewReader(`{"labels":{"a":"`), strings.NewReader(strings.Repeat("x", 65<<20)), strings.NewReader(`"}}`)), nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("65 MiB create body: %d", resp.StatusCode)
	}
	// A failed create leaves nothing: the only sandbox is the first.
	list, err := d.c.AllSandboxes(ctx, client.ListOptions{})
	if err != nil || len(list) != 1 || len(d.stateEntries()) != 1 {
		t.Fatalf("after bad creates: %d sandboxes, %d state dirs, %v", len(list), len(d.stateEntries()), err)
	}
	// The allowed parts of an inline policy apply: a denied syscall.
	pol := d.create(t, &api.CreateSandboxRequest{Policy: "seccomp:\n  deny: [mkdir, mkdirat]\n"})
	res, err := d.c.Exec(ctx, pol.ID, &api.ExecRequest{Argv: []string{"mkdir", "/tmp/x"}})
	if err != nil || res.ExitCode == 0 {
		t.Fatalf("mkdir under a policy denying it: %+v %v", res, err)
	}
	d.sh(t, sb.ID, "mkdir /tmp/x") // control: the default policy allows it
	// The OpenAPI document is served as is.
	_, doc := d.rawRequest(t, "GET", "/v1/openapi.json", nil, nil)
	if !bytes.Equal(doc, api.OpenAPI) {
		t.Fatal("served OpenAPI document differs from api.OpenAPI")
	}
	// Metrics name what the issue asks for.
	_, m := d.rawRequest(t, "GET", "/metrics", nil, nil)
	for _, name := range []string{"airlock_sandboxes{state=\"running\"}", "airlock_sandbox_create_seconds_bucket", "airlock_exec_seconds_bucket", "airlock_admission_queue_depth", "airlock_errors_total"} {
		if !bytes.Contains(m, []byte(name)) {
			t.Errorf("metrics lack %s", name)
		}
	}
}

// TestLongInputEcho: an error message repeats a caller's input only in
// part: a 10,000-byte id, query value, field name, label, command or
// signal gives a short message that still names the start of the input
// and its length. Control: a short bad input is repeated whole.
func TestLongInputEcho(t *testing.T) {
	d := startDaemon(t, "")
	sb := d.create(t, nil)
	const maxMsg = 400
	long := func(prefix string) string { return prefix + strings.Repeat("a", 10000-len(prefix)) }
	check := func(what string, resp *http.Response, body []byte, status int, want ...string) {
		t.Helper()
		var e api.Error
		if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != status {
			t.Errorf("%s: got %d %.200q, want %d with a JSON error", what, resp.StatusCode, body, status)
			return
		}
		if len(e.Err.Message) > maxMsg {
			t.Errorf("%s: message of %d bytes (want at most %d): %.200q...", what, len(e.Err.Message), maxMsg, e.Err.Message)
		}
		for _, w := range want {
			if !strings.Contains(e.Err.Message, w) {
				t.Errorf("%s: message %q does not contain %q", what, e.Err.Message, w)
			}
		}
	}
	json := map[string]string{"Content-Type": "application/json"}
	start := func(s string) string { return fmt.Sprintf("%q... (%d bytes)", s[:64], len(s)) }

	// Control: a short bad id is named whole.
	resp, body := d.rawRequest(t, "GET", "/v1/sandboxes/sb-zzzz", nil, nil)
	check("short id", resp, body, 404, `"sb-zzzz": not a sandbox id`)

	id := long("sb-")
	resp, body = d.rawRequest(t, "GET", "/v1/sandboxes/"+id, nil, nil)
	check("long id", resp, body, 404, start(id), "not a sandbox id")
	resp, body = d.rawRequest(t, "DELETE", "/v1/sandboxes/"+id, nil, nil)
	check("long id (delete)", resp, body, 404, start(id))
	pid := long("p")
	resp, body = d.rawRequest(t, "GET", "/v1/sandboxes/"+sb.ID+"/processes/"+pid, nil, nil)
	check("long process id", resp, body, 404, start(pid))
	state := long("zombie")
	resp, body = d.rawRequest(t, "GET", "/v1/sandboxes?state="+state, nil, nil)
	check("long state", resp, body, 400, start(state))
	limit := long("9")
	resp, body = d.rawRequest(t, "GET", "/v1/sandboxes?limit="+limit, nil, nil)
	check("long limit", resp, body, 400, start(limit))
	field := long("x")
	resp, body = d.rawRequest(t, "POST", "/v1/sandboxes", strings.NewReader(`{"`+field+`":1}`), json)
	check("long unknown field", resp, body, 400, "unknown field "+start(field))
	key := long("k=")
	resp, body = d.rawRequest(t, "POST", "/v1/sandboxes", strings.NewReader(`{"labels":{"`+key+`":"v"}}`), json)
	check("long label", resp, body, 400, start(key))
	sig := long("SIG")
	resp, body = d.rawRequest(t, "POST", "/v1/sandboxes/"+sb.ID+"/processes/p1/signal", strings.NewReader(`{"signal":"`+sig+`"}`), json)
	check("long signal", resp, body, 400, start(sig))
	cmd := strings.Repeat("c", 250) // one path component, so the lookup fails with "not found"
	resp, body = d.rawRequest(t, "POST", "/v1/sandboxes/"+sb.ID+"/exec", strings.NewReader(`{"argv":["`+cmd+`"]}`), json)
	check("long command", resp, body, 400, start(cmd), "command not found")
	kid := long("k")
	resp, body = d.rawRequest(t, "DELETE", "/v1/keys/"+kid, nil, nil)
	check("long key id", resp, body, 404, start(kid))

	// The CLI prints one short line naming the start of the id.
	c := exec.Command(airlockBin, "rm", id)
	c.Env = append(os.Environ(), "AIRLOCK_HOST=unix://"+d.sock)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Run(); err == nil {
		t.Fatal("airlock rm of a 10,000-byte id succeeded")
	}
	if line := strings.TrimSuffix(stderr.String(), "\n"); strings.Contains(line, "\n") || len(line) > maxMsg || !strings.Contains(line, start(id)) {
		t.Errorf("airlock rm: want one line of at most %d bytes naming %s, got %d bytes: %.300q", maxMsg, start(id), len(line), line)
	}
}

// TestAuthTCP: over TCP every call needs a valid, unrevoked key; key
// management is only on the unix socket; health needs nothing.
func TestAuthTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	d := startDaemon(t, "listen: "+addr+"\n")
	ctx := ctxT(t)
	key, err := d.c.CreateKey(ctx, "ci")
	if err != nil || !strings.HasPrefix(key.Key, "alk_") {
		t.Fatalf("create key: %+v %v", key, err)
	}
	anon, _ := client.New("http://"+addr, "")
	bad, _ := client.New("http://"+addr, key.Key+"x")
	good, _ := client.New("http://"+addr, key.Key)
	if err := anon.Health(ctx); err != nil {
		t.Fatalf("health without a key: %v", err)
	}
	_, err = anon.ListSandboxes(ctx, client.ListOptions{})
	wantCode(t, "no key", err, http.StatusUnauthorized)
	_, err = bad.ListSandboxes(ctx, client.ListOptions{})
	wantCode(t, "wrong key", err, http.StatusUnauthorized)
	sb, err := good.CreateSandbox(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create with a key: %v", err)
	}
	if res, err := good.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec with a key: %v", err)
	}
	_, err = good.CreateKey(ctx, "escalate")
	wantCode(t, "key management over TCP", err, http.StatusForbidden)
	keys, err := d.c.ListKeys(ctx)
	if err != nil || len(keys) != 1 || keys[0].Key != "" {
		t.Fatalf("list keys: %+v %v", keys, err)
	}
	if err := d.c.RevokeKey(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	_, err = good.ListSandboxes(ctx, client.ListOptions{})
	wantCode(t, "revoked key", err, http.StatusUnauthorized)
	// N10: the daemon's socket is not reachable from inside a sandbox.
	out := d.sh(t, sb.ID, "ls "+d.sock+" 2>&1; echo; cat "+d.cfg+" 2>&1 | head -1")
	if !strings.Contains(out, "No such file") {
		t.Fatalf("daemon files visible inside: %q", out)
	}
}

// A file whose size says 0 is read to its end (/proc's files have
// content all the same; they came back empty); a truly empty file is
// still empty, a regular one still its size (the controls).
func TestReadFileOfUnknownSize(t *testing.T) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	d.sh(t, sb.ID, ": > /workspace/empty; echo abc > /workspace/f")
	read := func(p string) string {
		r, _, err := d.c.ReadFile(ctx, sb.ID, p, client.DownloadOptions{})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		return string(b)
	}
	if got := read("/proc/self/status"); !strings.Contains(got, "Name:") {
		t.Errorf("/proc/self/status: %q", got)
	}
	if got := read("/workspace/empty"); got != "" {
		t.Errorf("an empty file: %q", got)
	}
	if got := read("/workspace/f"); got != "abc\n" {
		t.Errorf("a regular file: %q", got)
	}
}
