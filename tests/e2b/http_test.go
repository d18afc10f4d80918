//go:build linux

package e2b_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// e2bd is a daemon with its TCP listener and an API key.
type e2bd struct {
	*testdaemon.Daemon
	base string
	key  string
}

func startE2B(t *testing.T, extra string) *e2bd {
	t.Helper()
	addr := testdaemon.FreeAddr(t)
	d := testdaemon.Start(t, "listen: "+addr+"\n"+extra)
	return &e2bd{Daemon: d, base: "http://" + addr, key: d.Key(t, "e2b")}
}

// resp is an HTTP answer, read whole.
type resp struct {
	status int
	header http.Header
	body   string
}

func (r resp) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.body), v); err != nil {
		t.Fatalf("answer %d %q: %v", r.status, r.body, err)
	}
}

// do sends a request; hdr holds headers ("Host" sets the Host).
func do(t *testing.T, method, u string, hdr map[string]string, body io.Reader) resp {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, string(b)}
}

func jsonBody(v any) io.Reader {
	b, _ := json.Marshal(v)
	return bytes.NewReader(b)
}

func (d *e2bd) api(t *testing.T, method, path string, body any) resp {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = jsonBody(body)
	}
	return do(t, method, d.base+path, map[string]string{"X-API-Key": d.key, "Content-Type": "application/json"}, r)
}

type created struct {
	SandboxID       string `json:"sandboxID"`
	TemplateID      string `json:"templateID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
	Domain          string `json:"domain"`
}

func (d *e2bd) create(t *testing.T, body map[string]any) created {
	t.Helper()
	if _, ok := body["timeout"]; !ok {
		body["timeout"] = 600 // E2B's default, 15 s, is shorter than a test on a loaded machine
	}
	r := d.api(t, "POST", "/sandboxes", body)
	if r.status != http.StatusCreated {
		t.Fatalf("create %v: %d %s", body, r.status, r.body)
	}
	var c created
	r.json(t, &c)
	if c.SandboxID == "" || c.EnvdAccessToken == "" || c.EnvdVersion == "" {
		t.Fatalf("create: %s", r.body)
	}
	return c
}

func wantStatus(t *testing.T, what string, r resp, status int) {
	t.Helper()
	if r.status != status {
		t.Errorf("%s: %d %s, want %d", what, r.status, r.body, status)
	}
}

func TestControlPlaneAuth(t *testing.T) {
	d := startE2B(t, "")
	ctx := testdaemon.Ctx(t)
	u := d.base + "/v2/sandboxes"
	wantStatus(t, "no key", do(t, "GET", u, nil, nil), 401)
	wantStatus(t, "wrong key", do(t, "GET", u, map[string]string{"X-API-Key": "al_nope_nope"}, nil), 401)
	wantStatus(t, "the key", do(t, "GET", u, map[string]string{"X-API-Key": d.key}, nil), 200)
	wantStatus(t, "the key as a bearer token", do(t, "GET", u, map[string]string{"Authorization": "Bearer " + d.key}, nil), 200)
	r := do(t, "GET", u, nil, nil)
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	r.json(t, &e)
	if e.Code != 401 || !strings.Contains(e.Message, "airlock keys create") {
		t.Errorf("401 body %q: want E2B's error document naming how to make a key", r.body)
	}
	// A revoked key is refused; another key still works.
	other, err := d.C.CreateKey(ctx, "revoked")
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "a key before revocation", do(t, "GET", u, map[string]string{"X-API-Key": other.Key}, nil), 200)
	if err := d.C.RevokeKey(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "a revoked key", do(t, "GET", u, map[string]string{"X-API-Key": other.Key}, nil), 401)
	wantStatus(t, "create with a revoked key", do(t, "POST", d.base+"/sandboxes", map[string]string{"X-API-Key": other.Key}, jsonBody(map[string]any{"templateID": "base"})), 401)
	// airlock's own API is still there, behind its own authentication.
	wantStatus(t, "/v1 without a key", do(t, "GET", d.base+"/v1/sandboxes", nil, nil), 401)
	wantStatus(t, "/v1 with the key", do(t, "GET", d.base+"/v1/sandboxes", map[string]string{"Authorization": "Bearer " + d.key}, nil), 200)
	// Nothing was created by the refused calls.
	list, err := d.C.AllSandboxes(ctx, client.ListOptions{})
	if err != nil || len(list) != 0 {
		t.Errorf("sandboxes after refused calls: %v, %v", list, err)
	}
}

func TestCreateInput(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "net.yaml")
	if err := os.WriteFile(pol, []byte("network:\n  mode: allowlist\n  allow: [api.test]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startE2B(t, "policies:\n  netpol: "+pol+"\n")
	ctx := testdaemon.Ctx(t)
	count := func() int {
		l, err := d.C.AllSandboxes(ctx, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}

	// Refusals, each with nothing left behind.
	for _, c := range []struct {
		what   string
		body   string
		status int
	}{
		{"unknown template", `{"templateID":"nope"}`, 404},
		{"negative timeout", `{"templateID":"base","timeout":-5}`, 400},
		{"malformed JSON", `{"templateID":`, 400},
		{"wrong type", `{"templateID":"base","metadata":[1]}`, 400},
		{"autoPause", `{"templateID":"base","autoPause":true}`, 501},
		{"network rules", `{"templateID":"base","network":{"allowOut":["1.2.3.4"]}}`, 501},
		{"internet for a policy without network", `{"templateID":"base","allow_internet_access":true}`, 400},
		{"bad metadata key", `{"templateID":"base","metadata":{"":"x"}}`, 400},
	} {
		r := do(t, "POST", d.base+"/sandboxes", map[string]string{"X-API-Key": d.key}, strings.NewReader(c.body))
		wantStatus(t, c.what, r, c.status)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d sandboxes left behind by refused creates", n)
	}

	// Controls: the same fields, accepted.
	base := d.create(t, map[string]any{"templateID": "base", "timeout": 60, "metadata": map[string]string{"k": "v"}, "envVars": map[string]string{"E": "1"}})
	if base.TemplateID != "base" {
		t.Errorf("templateID %q", base.TemplateID)
	}
	res, err := d.C.Exec(ctx, base.SandboxID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo $E"}})
	if err != nil || string(res.Stdout) != "1\n" {
		t.Errorf("envVars seen from /v1: %q %v", res.Stdout, err)
	}
	sb, err := d.C.GetSandbox(ctx, base.SandboxID)
	if err != nil || sb.Labels["k"] != "v" || sb.ExpiresAt == nil || time.Until(*sb.ExpiresAt) > 61*time.Second {
		t.Errorf("from /v1: %+v %v", sb, err)
	}
	d.create(t, map[string]any{"templateID": "base", "autoPause": false, "allow_internet_access": false})
	withNet := d.create(t, map[string]any{"templateID": "netpol", "allow_internet_access": true})
	np, err := d.C.NetworkPolicy(ctx, withNet.SandboxID)
	if err != nil || np.Mode != "allowlist" {
		t.Errorf("netpol with internet: %+v %v", np, err)
	}
	noNet := d.create(t, map[string]any{"templateID": "netpol", "allow_internet_access": false})
	np, err = d.C.NetworkPolicy(ctx, noNet.SandboxID)
	if err != nil || np.Mode != "none" {
		t.Errorf("netpol without internet: %+v %v, want mode none", np, err)
	}

	// get, timeout, kill.
	wantStatus(t, "get", d.api(t, "GET", "/sandboxes/"+base.SandboxID, nil), 200)
	wantStatus(t, "get unknown", d.api(t, "GET", "/sandboxes/sb-00000000deadbeef", nil), 404)
	wantStatus(t, "timeout 0", d.api(t, "POST", "/sandboxes/"+base.SandboxID+"/timeout", map[string]any{"timeout": 0}), 400)
	wantStatus(t, "timeout", d.api(t, "POST", "/sandboxes/"+base.SandboxID+"/timeout", map[string]any{"timeout": 120}), 204)
	wantStatus(t, "timeout unknown", d.api(t, "POST", "/sandboxes/sb-00000000deadbeef/timeout", map[string]any{"timeout": 120}), 404)
	wantStatus(t, "refresh", d.api(t, "POST", "/sandboxes/"+base.SandboxID+"/refreshes", map[string]any{"duration": 100}), 204)
	wantStatus(t, "metrics (not served)", d.api(t, "GET", "/sandboxes/"+base.SandboxID+"/metrics", nil), 501)
	wantStatus(t, "templates (not served)", d.api(t, "GET", "/templates", nil), 501)
	wantStatus(t, "secrets (not served)", d.api(t, "POST", "/secrets", map[string]any{"name": "x"}), 501)
	wantStatus(t, "kill", d.api(t, "DELETE", "/sandboxes/"+noNet.SandboxID, nil), 204)
	wantStatus(t, "get after kill", d.api(t, "GET", "/sandboxes/"+noNet.SandboxID, nil), 404)
	wantStatus(t, "kill again", d.api(t, "DELETE", "/sandboxes/"+noNet.SandboxID, nil), 404)

	// List: metadata filter, limit and nextToken paging, order.
	var ids []string
	for range 3 {
		ids = append(ids, d.create(t, map[string]any{"templateID": "base", "metadata": map[string]string{"batch": "b 1"}}).SandboxID)
	}
	md := url.QueryEscape(url.Values{"batch": {"b 1"}}.Encode())
	type listed struct {
		SandboxID string            `json:"sandboxID"`
		State     string            `json:"state"`
		Metadata  map[string]string `json:"metadata"`
	}
	var page1, page2, all, desc []listed
	r := d.api(t, "GET", "/v2/sandboxes?limit=2&metadata="+md, nil)
	r.json(t, &page1)
	next := r.header.Get("X-Next-Token")
	if len(page1) != 2 || next == "" {
		t.Fatalf("page 1: %s (next %q)", r.body, next)
	}
	r = d.api(t, "GET", "/v2/sandboxes?limit=2&metadata="+md+"&nextToken="+url.QueryEscape(next), nil)
	r.json(t, &page2)
	if len(page2) != 1 || r.header.Get("X-Next-Token") != "" {
		t.Fatalf("page 2: %s (next %q)", r.body, r.header.Get("X-Next-Token"))
	}
	got := []string{page1[0].SandboxID, page1[1].SandboxID, page2[0].SandboxID}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Errorf("pages %v, want the creation order %v", got, ids)
	}
	d.api(t, "GET", "/v2/sandboxes?order=desc&metadata="+md, nil).json(t, &desc)
	if len(desc) != 3 || desc[0].SandboxID != ids[2] || desc[2].SandboxID != ids[0] {
		t.Errorf("desc: %v", desc)
	}
	d.api(t, "GET", "/sandboxes?metadata="+md, nil).json(t, &all)
	if len(all) != 3 || all[0].Metadata["batch"] != "b 1" || all[0].State != "running" {
		t.Errorf("v1 list by metadata: %v", all)
	}
	var other []listed
	d.api(t, "GET", "/v2/sandboxes?metadata="+url.QueryEscape("batch=zzz"), nil).json(t, &other)
	if len(other) != 0 {
		t.Errorf("list by other metadata: %v", other)
	}
	wantStatus(t, "bad nextToken", d.api(t, "GET", "/v2/sandboxes?nextToken=%21%21", nil), 400)
	wantStatus(t, "bad limit", d.api(t, "GET", "/v2/sandboxes?limit=0", nil), 400)
	wantStatus(t, "bad state", d.api(t, "GET", "/v2/sandboxes?state=dead", nil), 400)

	// Pause and connect.
	wantStatus(t, "pause", d.api(t, "POST", "/sandboxes/"+ids[0]+"/pause", nil), 204)
	wantStatus(t, "pause again", d.api(t, "POST", "/sandboxes/"+ids[0]+"/pause", nil), 409)
	var paused []listed
	d.api(t, "GET", "/v2/sandboxes?state=paused", nil).json(t, &paused)
	if len(paused) != 1 || paused[0].SandboxID != ids[0] {
		t.Errorf("paused list: %v", paused)
	}
	wantStatus(t, "connect resumes", d.api(t, "POST", "/v2/sandboxes/"+ids[0]+"/connect", map[string]any{"timeout": 30}), 201)
	wantStatus(t, "connect to a running one", d.api(t, "POST", "/v2/sandboxes/"+ids[0]+"/connect", map[string]any{"timeout": 30}), 200)
	wantStatus(t, "connect unknown", d.api(t, "POST", "/v2/sandboxes/sb-00000000deadbeef/connect", map[string]any{"timeout": 30}), 404)
}

// envd is a request to a sandbox's envd by headers.
func (d *e2bd) envd(t *testing.T, id, token, method, path string, hdr map[string]string, body io.Reader) resp {
	t.Helper()
	h := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983"}
	if token != "" {
		h["X-Access-Token"] = token
	}
	for k, v := range hdr {
		h[k] = v
	}
	return do(t, method, d.base+path, h, body)
}

func (d *e2bd) rpc(t *testing.T, id, token, proc string, msg any) resp {
	t.Helper()
	return d.envd(t, id, token, "POST", proc, map[string]string{"Content-Type": "application/json"}, jsonBody(msg))
}

func TestEnvdAccessToken(t *testing.T) {
	d := startE2B(t, "")
	a := d.create(t, map[string]any{"templateID": "base"})
	b := d.create(t, map[string]any{"templateID": "base"})
	stat := map[string]any{"path": "/workspace"}
	const p = "/filesystem.Filesystem/Stat"
	wantStatus(t, "own token", d.rpc(t, a.SandboxID, a.EnvdAccessToken, p, stat), 200)
	wantStatus(t, "no token", d.rpc(t, a.SandboxID, "", p, stat), 401)
	wantStatus(t, "another sandbox's token", d.rpc(t, a.SandboxID, b.EnvdAccessToken, p, stat), 401)
	wantStatus(t, "b's own token", d.rpc(t, b.SandboxID, b.EnvdAccessToken, p, stat), 200)
	wantStatus(t, "a forged token", d.rpc(t, a.SandboxID, strings.Repeat("0", 64), p, stat), 401)
	wantStatus(t, "an API key instead", d.envd(t, a.SandboxID, "", "POST", p, map[string]string{"Content-Type": "application/json", "X-API-Key": d.key}, jsonBody(stat)), 200)
	wantStatus(t, "a wrong API key", d.envd(t, a.SandboxID, "", "POST", p, map[string]string{"Content-Type": "application/json", "X-API-Key": "al_x_y"}, jsonBody(stat)), 401)
	// Files too.
	wantStatus(t, "download with another's token", d.envd(t, a.SandboxID, b.EnvdAccessToken, "GET", "/files?path=/etc/hostname", nil, nil), 401)
	wantStatus(t, "download with the token", d.envd(t, a.SandboxID, a.EnvdAccessToken, "GET", "/files?path=/etc/hostname", nil, nil), 200)

	// The token survives a restart (its key is in the data directory), and
	// is the one GET /sandboxes/{id} reports.
	d.Restart(syscallTERM)
	wantStatus(t, "own token after a restart", d.rpc(t, a.SandboxID, a.EnvdAccessToken, p, stat), 200)
	var det struct {
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	d.api(t, "GET", "/sandboxes/"+a.SandboxID, nil).json(t, &det)
	if det.EnvdAccessToken != a.EnvdAccessToken {
		t.Errorf("token after restart %q, want %q", det.EnvdAccessToken, a.EnvdAccessToken)
	}
	// A sandbox that is gone answers 502, which the SDKs read as "not running".
	wantStatus(t, "kill", d.api(t, "DELETE", "/sandboxes/"+b.SandboxID, nil), 204)
	wantStatus(t, "envd of a killed sandbox", d.envd(t, b.SandboxID, b.EnvdAccessToken, "GET", "/health", nil, nil), 502)
	wantStatus(t, "envd of a live sandbox", d.envd(t, a.SandboxID, a.EnvdAccessToken, "GET", "/health", nil, nil), 204)
}

// connectFrame is one Connect streaming envelope.
func connectFrame(flags byte, payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

func TestEnvdBadInput(t *testing.T) {
	d := startE2B(t, "max_upload: 1M\n")
	a := d.create(t, map[string]any{"templateID": "base"})
	id, tok := a.SandboxID, a.EnvdAccessToken
	ctx := testdaemon.Ctx(t)
	stream := map[string]string{"Content-Type": "application/connect+json"}
	start := `{"process":{"cmd":"/bin/echo","args":["framed"]}}`

	// Malformed Connect frames: a 4xx or an error end-of-stream, never a hang.
	r := d.envd(t, id, tok, "POST", "/process.Process/Start", stream, bytes.NewReader(connectFrame(0, []byte(start))))
	if r.status != 200 || !strings.Contains(r.body, "ZnJhbWVk") { // base64 of "framed"
		t.Errorf("a well-formed Start: %d %q", r.status, r.body)
	}
	for _, c := range []struct {
		what string
		body []byte
	}{
		{"a truncated frame", connectFrame(0, []byte(start))[:12]},
		{"a length past the limit", append([]byte{0, 0x7f, 0xff, 0xff, 0xff}, "{}"...)},
		{"not JSON", connectFrame(0, []byte("{{{"))},
		{"an empty body", nil},
	} {
		r := d.envd(t, id, tok, "POST", "/process.Process/Start", stream, bytes.NewReader(c.body))
		if r.status == 200 && !strings.Contains(r.body, `"error"`) || r.status >= 500 {
			t.Errorf("%s: %d %q, want an error", c.what, r.status, r.body)
		}
	}
	r = d.rpc(t, id, tok, "/process.Process/List", map[string]any{})
	wantStatus(t, "unary control", r, 200)
	wantStatus(t, "unary with bad JSON", d.envd(t, id, tok, "POST", "/process.Process/List", map[string]string{"Content-Type": "application/json"}, strings.NewReader("{")), 400)
	wantStatus(t, "unknown method", d.rpc(t, id, tok, "/process.Process/Nope", map[string]any{}), 404)
	wantStatus(t, "resizing a process without a terminal", d.rpc(t, id, tok, "/process.Process/Update", map[string]any{"process": map[string]any{"pid": 1}, "pty": map[string]any{"size": map[string]any{"cols": 10, "rows": 10}}}), 404)
	wantStatus(t, "unknown pid", d.rpc(t, id, tok, "/process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": 999999}, "signal": "SIGNAL_SIGKILL"}), 404)
	wantStatus(t, "stat of a missing file", d.rpc(t, id, tok, "/filesystem.Filesystem/Stat", map[string]any{"path": "nope"}), 404)
	wantStatus(t, "NUL in a path", d.rpc(t, id, tok, "/filesystem.Filesystem/Stat", map[string]any{"path": "a\x00b"}), 400)
	wantStatus(t, "list a directory", d.rpc(t, id, tok, "/filesystem.Filesystem/ListDir", map[string]any{"path": "/etc"}), 200)
	wantStatus(t, "list a file", d.rpc(t, id, tok, "/filesystem.Filesystem/ListDir", map[string]any{"path": "/etc/hostname"}), 400)
	wantStatus(t, "list a missing directory", d.rpc(t, id, tok, "/filesystem.Filesystem/ListDir", map[string]any{"path": "nope"}), 404)
	if r := d.envd(t, id, tok, "POST", "/filesystem.Filesystem/WatchDir", stream, bytes.NewReader(connectFrame(0, []byte(`{"path":"/etc/hostname"}`)))); !strings.Contains(r.body, `"invalid_argument"`) {
		t.Errorf("watch a file: %d %q, want an invalid_argument end of stream", r.status, r.body)
	}

	// Paths that climb out of /workspace stay in the sandbox's own view.
	hostFile := filepath.Join(t.TempDir(), "escape.txt")
	climb := strings.Repeat("../", 12) + strings.TrimPrefix(hostFile, "/")
	r = d.envd(t, id, tok, "POST", "/files?path="+url.QueryEscape(climb), map[string]string{"Content-Type": "application/octet-stream"}, strings.NewReader("inside"))
	wantStatus(t, "write through ../", r, 200)
	if _, err := os.Stat(hostFile); !os.IsNotExist(err) {
		t.Fatalf("a write through ../ reached the host: %v", err)
	}
	res, err := d.C.Exec(ctx, id, &api.ExecRequest{Argv: []string{"cat", hostFile}})
	if err != nil || string(res.Stdout) != "inside" {
		t.Errorf("the ../ write inside the sandbox: %q %v", res.Stdout, err)
	}
	// Uploads over max_upload: 413, and the file keeps its content.
	small := d.envd(t, id, tok, "POST", "/files?path=big.bin", map[string]string{"Content-Type": "application/octet-stream"}, strings.NewReader("original"))
	wantStatus(t, "small upload", small, 200)
	big := d.envd(t, id, tok, "POST", "/files?path=big.bin", map[string]string{"Content-Type": "application/octet-stream"}, bytes.NewReader(make([]byte, 3<<20)))
	wantStatus(t, "oversized upload", big, 413)
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	fw, _ := mw.CreateFormFile("file", "big.bin")
	fw.Write(make([]byte, 3<<20))
	mw.Close()
	wantStatus(t, "oversized multipart upload", d.envd(t, id, tok, "POST", "/files", map[string]string{"Content-Type": mw.FormDataContentType()}, &mp), 413)
	r = d.envd(t, id, tok, "GET", "/files?path=big.bin", nil, nil)
	if r.status != 200 || r.body != "original" {
		t.Errorf("after refused uploads: %d %d bytes, want the original content", r.status, len(r.body))
	}
	wantStatus(t, "multipart without a file part", d.envd(t, id, tok, "POST", "/files?path=x", map[string]string{"Content-Type": "multipart/form-data; boundary=zz"}, strings.NewReader("--zz--\r\n")), 400)
	wantStatus(t, "download of a directory", d.envd(t, id, tok, "GET", "/files?path=/workspace", nil, nil), 400)
	wantStatus(t, "download of a missing file", d.envd(t, id, tok, "GET", "/files?path=nope", nil, nil), 404)
	wantStatus(t, "bad E2b-Sandbox-Port", do(t, "GET", d.base+"/health", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "x", "X-Access-Token": tok}, nil), 400)
}

func TestHostRouting(t *testing.T) {
	d := startE2B(t, "e2b_domain: e2b.test\n")
	a := d.create(t, map[string]any{"templateID": "base"})
	b := d.create(t, map[string]any{"templateID": "base"})
	if a.Domain != "e2b.test" {
		t.Errorf("create's domain %q", a.Domain)
	}
	ctx := testdaemon.Ctx(t)
	host := func(port int, id string) string { return strings.Join([]string{itoa(port), id}, "-") + ".e2b.test" }

	// envd by host.
	stat := jsonBody(map[string]any{"path": "/workspace"})
	r := do(t, "POST", d.base+"/filesystem.Filesystem/Stat", map[string]string{"Host": host(49983, a.SandboxID), "X-Access-Token": a.EnvdAccessToken, "Content-Type": "application/json"}, stat)
	wantStatus(t, "envd by host", r, 200)
	r = do(t, "POST", d.base+"/filesystem.Filesystem/Stat", map[string]string{"Host": host(49983, a.SandboxID), "X-Access-Token": b.EnvdAccessToken, "Content-Type": "application/json"}, jsonBody(map[string]any{"path": "/workspace"}))
	wantStatus(t, "envd by host with another's token", r, 401)

	// A server inside a: reachable only with a's token or an API key.
	p, err := d.C.StartProcess(ctx, a.SandboxID, &api.ExecRequest{Argv: []string{"python3", "-u", "-c", previewServer}})
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, d, a.SandboxID, p.ID, "listening")
	u := d.base + "/hello?x=1"
	r = do(t, "GET", u, map[string]string{"Host": host(8123, a.SandboxID), "X-Access-Token": a.EnvdAccessToken, "X-Custom": "kept"}, nil)
	if r.status != 200 || !strings.Contains(r.body, "GET /hello?x=1") || !strings.Contains(r.body, "custom=kept") ||
		strings.Contains(r.body, a.EnvdAccessToken) || strings.Contains(r.body, "token=") {
		t.Errorf("preview by host: %d %q", r.status, r.body)
	}
	r = do(t, "GET", u, map[string]string{"Host": host(8123, a.SandboxID), "X-API-Key": d.key}, nil)
	if r.status != 200 || strings.Contains(r.body, d.key) || strings.Contains(r.body, "apikey=") {
		t.Errorf("preview with an API key: %d %q", r.status, r.body)
	}
	wantStatus(t, "preview without credentials", do(t, "GET", u, map[string]string{"Host": host(8123, a.SandboxID)}, nil), 401)
	wantStatus(t, "preview with b's token", do(t, "GET", u, map[string]string{"Host": host(8123, a.SandboxID), "X-Access-Token": b.EnvdAccessToken}, nil), 401)
	wantStatus(t, "b's port (nothing listens there)", do(t, "GET", u, map[string]string{"Host": host(8123, b.SandboxID), "X-Access-Token": b.EnvdAccessToken}, nil), 502)
	wantStatus(t, "preview by headers", do(t, "GET", u, map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "8123", "X-Access-Token": a.EnvdAccessToken}, nil), 200)
	wantStatus(t, "port 0", do(t, "GET", u, map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "0", "X-Access-Token": a.EnvdAccessToken}, nil), 400)
	// Another domain, or a host that is not PORT-ID, goes to the control plane.
	wantStatus(t, "other domain", do(t, "GET", d.base+"/v2/sandboxes", map[string]string{"Host": host(8123, a.SandboxID) + ".evil", "X-API-Key": d.key}, nil), 200)
	wantStatus(t, "not PORT-ID", do(t, "GET", d.base+"/v2/sandboxes", map[string]string{"Host": "api.e2b.test", "X-API-Key": d.key}, nil), 200)
	if !strings.Contains(d.Logs(), "port=8123") {
		t.Errorf("preview requests were not logged")
	}
}

// previewServer answers each request with its method, path and the headers
// that carry credentials (so a leak shows).
const previewServer = `
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("%s %s custom=%s token=%s apikey=%s auth=%s" % (self.command, self.path, self.headers.get("X-Custom"),
             self.headers.get("X-Access-Token") or "", self.headers.get("X-Api-Key") or "", self.headers.get("Authorization") or "")).encode()
        b = b.replace(b"token= ", b" ").replace(b"apikey= ", b" ")
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 8123), H)
print("listening", flush=True)
s.serve_forever()
`

func waitOutput(t *testing.T, d *e2bd, id, pid, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got strings.Builder
	errStop := io.EOF
	err := d.C.FollowOutput(ctx, id, pid, "", func(e api.OutputEvent) error {
		got.Write(e.Data)
		if strings.Contains(got.String(), want) {
			return errStop
		}
		return nil
	})
	if err != errStop {
		t.Fatalf("waiting for %q from %s: %v (output %q)", want, pid, err, got.String())
	}
}

const syscallTERM = syscall.SIGTERM

func itoa(n int) string { return strconv.Itoa(n) }
