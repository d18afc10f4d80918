package uidpool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeEtc makes a fake /etc with the given files.
func writeEtc(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const passwd = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\nalice:x:1000:1000::/home/alice:/bin/bash\n"
const group = "root:x:0:\nnogroup:x:65534:\nalice:x:1000:\n"

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Range
		err  string
	}{
		{in: "200000:131072", want: Range{200000, 131072}},
		{in: " 65536 : 65536 ", want: Range{65536, 65536}},
		{in: "200000", err: "START:SIZE"},
		{in: "a:b", err: "START:SIZE"},
		{in: "200000:1000", err: "below one sandbox"},
		{in: "0:0", err: "uid pool 0:0: size 0 is below one sandbox"},
		{in: "1000:65536", err: "must start at or above 65536"},
		{in: "0:131072", err: "must start at or above"},
		{in: "4294901760:65536", err: "past the last valid id"},
		{in: "4294901759:65536", want: Range{4294901759, 65536}},
		{in: "-5:65536", err: "must start"},
	} {
		got, err := ParseRange(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseRange(%q) = %v, %v; want an error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseRange(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestResolveSources(t *testing.T) {
	// No root entries: the default; the users' ranges do not overlap it.
	etc := writeEtc(t, map[string]string{"passwd": passwd, "group": group,
		"subuid": "alice:100000:65536\n", "subgid": "alice:100000:65536\n"})
	p, err := resolveIn(etc, nil)
	if err != nil || p.UID != Default || p.GID != Default || p.Source != SourceDefault || p.Slots() != 2048 {
		t.Fatalf("default: %+v, %v", p, err)
	}
	// Root's entries (by name or uid; the first big enough) are the pool,
	// uids and gids each from their file.
	etc = writeEtc(t, map[string]string{"passwd": passwd, "group": group,
		"subuid": "alice:100000:65536\nroot:165536:100\n0:1000000:262144\n",
		"subgid": "# comment\n\nroot:2000000:131072\nalice:100000:65536\n"})
	p, err = resolveIn(etc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != (Range{1000000, 262144}) || p.GID != (Range{2000000, 131072}) || p.Source != SourceSubids || p.Slots() != 2 {
		t.Errorf("root's ranges: %+v", p)
	}
	if u, g := p.Slot(1); u != 1065536 || g != 2065536 {
		t.Errorf("slot 1 = %d/%d", u, g)
	}
	// A configured pool wins over root's entries.
	conf := Range{3000000, 65536 * 4}
	p, err = resolveIn(etc, &conf)
	if err != nil || p.UID != conf || p.GID != conf || p.Source != SourceConfig {
		t.Errorf("configured: %+v, %v", p, err)
	}
	// Root in only one of the files: refused, with the fix.
	etc = writeEtc(t, map[string]string{"passwd": passwd, "group": group, "subuid": "root:1000000:65536\n"})
	if _, err := resolveIn(etc, nil); err == nil || !strings.Contains(err.Error(), "only one of") {
		t.Errorf("root only in subuid: %v", err)
	}
	// Malformed lines are errors, not silently skipped.
	etc = writeEtc(t, map[string]string{"subuid": "alice:100000\n"})
	if _, err := resolveIn(etc, nil); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("malformed subuid: %v", err)
	}
}

// A pool that shares ids with another user's subordinate range, or holds a
// host account, is refused with what it collides with; the same pool moved
// clear of them is accepted (the control).
func TestResolveRefusesSharedIDs(t *testing.T) {
	etc := writeEtc(t, map[string]string{
		"passwd": passwd + "svc:x:300000:1000::/:/bin/false\n",
		"group":  group + "bigg:x:500000:\n",
		"subuid": "alice:100000:65536\nroot:1000000:65536\n",
		"subgid": "alice:100000:65536\nroot:1000000:65536\n",
	})
	for _, c := range []struct {
		pool Range
		err  string
	}{
		{Range{131072, 65536}, "alice's subordinate uids 100000-165535"},
		{Range{300000, 65536}, "user svc (id 300000"},
		{Range{460000, 65536}, "group bigg (id 500000"},
	} {
		_, err := resolveIn(etc, &c.pool)
		if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "--uid-pool") {
			t.Errorf("pool %s: %v; want an error naming %q and the fix", c.pool, err, c.err)
		}
	}
	// Control: clear of everyone, and root's own range may be used.
	for _, ok := range []Range{{600000, 65536 * 8}, {1000000, 65536}} {
		if _, err := resolveIn(etc, &ok); err != nil {
			t.Errorf("pool %s: %v", ok, err)
		}
	}
	// Only gids collide: refused too.
	etc = writeEtc(t, map[string]string{"subgid": "bob:700000:65536\n"})
	if _, err := resolveIn(etc, &Range{700000, 65536}); err == nil || !strings.Contains(err.Error(), "subordinate gids") {
		t.Errorf("gid overlap: %v", err)
	}
}
