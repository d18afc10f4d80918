package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A configuration with unknown keys or a wrong type is refused on one
// line that names each key and line, without the decoder's Go type
// names; a correct one loads (the control).
func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, err := LoadFile(write("unknown.yaml", "bogus: 1\nbogus2: 2\n"))
	if err == nil || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "daemon.Config") ||
		!strings.Contains(err.Error(), "line 1: unknown key bogus") || !strings.Contains(err.Error(), "line 2: unknown key bogus2") {
		t.Errorf("unknown keys: %v", err)
	}
	_, err = LoadFile(write("type.yaml", "socket: [a, b]\n"))
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("wrong type: %v", err)
	}
	c, err := LoadFile(write("ok.yaml", "socket: /tmp/x.sock\n"))
	if err != nil || c.Socket != "/tmp/x.sock" {
		t.Errorf("control: %+v %v", c, err)
	}
}
