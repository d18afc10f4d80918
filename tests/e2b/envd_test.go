//go:build linux

package e2b_test

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// TestEnvdCompression: a client that accepts gzip (the SDKs' fetch always
// does) gets small Connect answers as they are, and large ones gzipped.
func TestEnvdCompression(t *testing.T) {
	d := startE2B(t, "")
	a := d.create(t, map[string]any{"templateID": "base"})
	id, tok := a.SandboxID, a.EnvdAccessToken
	ctx := testdaemon.Ctx(t)
	// 600 files: their listing is far over the threshold.
	if res, err := d.C.Exec(ctx, id, &api.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p many && cd many && for i in $(seq 600); do : > file-with-a-long-name-$i; done"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("making files: %v %+v", err, res)
	}
	gz := map[string]string{"Content-Type": "application/json", "Accept-Encoding": "gzip"}
	small := d.envd(t, id, tok, "POST", "/filesystem.Filesystem/Stat", gz, jsonBody(map[string]any{"path": "many"}))
	if small.status != 200 || small.header.Get("Content-Encoding") != "" || !strings.Contains(small.body, `"FILE_TYPE_DIRECTORY"`) {
		t.Errorf("a small answer: %d, Content-Encoding %q, %q; want it plain", small.status, small.header.Get("Content-Encoding"), small.body)
	}
	large := d.envd(t, id, tok, "POST", "/filesystem.Filesystem/ListDir", gz, jsonBody(map[string]any{"path": "many"}))
	if large.status != 200 || large.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("a large answer: %d, Content-Encoding %q; want gzip", large.status, large.header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(strings.NewReader(large.body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Entries []struct {
			Name string `json:"name"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(b, &list); err != nil || len(list.Entries) != 600 {
		t.Errorf("the gzipped listing: %d entries, %v", len(list.Entries), err)
	}
	// Without Accept-Encoding the large answer is plain too.
	plain := d.envd(t, id, tok, "POST", "/filesystem.Filesystem/ListDir", map[string]string{"Content-Type": "application/json", "Accept-Encoding": "identity"}, jsonBody(map[string]any{"path": "many"}))
	if plain.status != 200 || plain.header.Get("Content-Encoding") != "" || strings.Count(plain.body, `"name"`) != 600 {
		t.Errorf("a large answer to a client without gzip: %d, Content-Encoding %q, %d names", plain.status, plain.header.Get("Content-Encoding"), strings.Count(plain.body, `"name"`))
	}
}

// TestEnvdMakeDirMoveUpload: MakeDir makes missing parents and answers
// the new directory; one that exists (a directory or a file) is
// already_exists, as in E2B, next to the same call on a new path. Move
// answers the destination; an upload into a missing directory makes it.
func TestEnvdMakeDirMoveUpload(t *testing.T) {
	d := startE2B(t, "")
	a := d.create(t, map[string]any{"templateID": "base"})
	id, tok := a.SandboxID, a.EnvdAccessToken
	type entry struct {
		Entry struct {
			Name string `json:"name"`
			Type string `json:"type"`
			Path string `json:"path"`
			Size string `json:"size"`
		} `json:"entry"`
	}
	const fs = "/filesystem.Filesystem/"
	r := d.rpc(t, id, tok, fs+"MakeDir", map[string]any{"path": "x/y/z"})
	var e entry
	if r.json(t, &e); r.status != 200 || e.Entry.Type != "FILE_TYPE_DIRECTORY" || e.Entry.Path != "/workspace/x/y/z" || e.Entry.Name != "z" {
		t.Fatalf("MakeDir with missing parents: %d %s", r.status, r.body)
	}
	if r := d.rpc(t, id, tok, fs+"Stat", map[string]any{"path": "/workspace/x/y"}); r.status != 200 || !strings.Contains(r.body, "FILE_TYPE_DIRECTORY") {
		t.Errorf("the parent made by MakeDir: %d %s", r.status, r.body)
	}
	r = d.rpc(t, id, tok, fs+"MakeDir", map[string]any{"path": "x/y/z"})
	if r.status != 409 || !strings.Contains(r.body, `"already_exists"`) {
		t.Errorf("MakeDir of an existing directory: %d %s, want 409 already_exists", r.status, r.body)
	}
	wantStatus(t, "upload into a missing directory", d.envd(t, id, tok, "POST", "/files?path=new/deep/f.txt", map[string]string{"Content-Type": "application/octet-stream"}, strings.NewReader("hello")), 200)
	if r := d.envd(t, id, tok, "GET", "/files?path=/workspace/new/deep/f.txt", nil, nil); r.status != 200 || r.body != "hello" {
		t.Errorf("reading the upload back: %d %q", r.status, r.body)
	}
	r = d.rpc(t, id, tok, fs+"MakeDir", map[string]any{"path": "new/deep/f.txt"})
	if r.status != 409 || !strings.Contains(r.body, `"already_exists"`) {
		t.Errorf("MakeDir of an existing file: %d %s, want 409 already_exists", r.status, r.body)
	}
	wantStatus(t, "MakeDir under a file", d.rpc(t, id, tok, fs+"MakeDir", map[string]any{"path": "new/deep/f.txt/sub"}), 400)

	r = d.rpc(t, id, tok, fs+"Move", map[string]any{"source": "new/deep/f.txt", "destination": "x/moved.txt"})
	e = entry{}
	if r.json(t, &e); r.status != 200 || e.Entry.Type != "FILE_TYPE_FILE" || e.Entry.Path != "/workspace/x/moved.txt" || e.Entry.Name != "moved.txt" || e.Entry.Size != "5" {
		t.Errorf("Move: %d %s", r.status, r.body)
	}
	wantStatus(t, "the source after the move", d.rpc(t, id, tok, fs+"Stat", map[string]any{"path": "new/deep/f.txt"}), 404)
	wantStatus(t, "Move of a missing file", d.rpc(t, id, tok, fs+"Move", map[string]any{"source": "nope", "destination": "x/nope"}), 404)
}
