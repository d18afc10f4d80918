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
