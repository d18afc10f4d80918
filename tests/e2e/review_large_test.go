//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/workspace/wstest"
)

// A 100k-file workspace: nothing is copied up front (the run's layer holds
// only what the sandbox wrote), the review lists exactly the 10 files the
// sandbox changed, and the apply changes exactly those.
func TestReviewLargeTree(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: writes 100k files")
	}
	need(t)
	o := opts{}
	changes := changesEnv(t, &o)
	ws := t.TempDir()
	const files = 100000
	if err := wstest.MakeTree(ws, files); err != nil {
		t.Fatal(err)
	}
	var want []string
	var script strings.Builder
	for i := 0; i < 10; i++ {
		p := wstest.Path(i * 9973 % files)
		want = append(want, p)
		fmt.Fprintf(&script, "echo changed >> %s; ", p)
	}
	sort.Strings(want)
	id := pendingID(t, sh(t, o, []string{"--review", "--workspace", ws}, script.String()))

	// The layer holds the 10 files and their 10 directories, nothing else.
	n := 0
	filepath.Walk(filepath.Join(changes, id, "layer", "upper"), func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			n++
		}
		return nil
	})
	if n > 1+10+10 {
		t.Errorf("the run's upper layer has %d entries for 10 changed files", n)
	}

	r := airlock(t, o, "review", "diff", ws, "--json")
	mustOK(t, r, "review diff --json")
	var list []struct{ Path, Kind string }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	var got []string
	for _, c := range list {
		if c.Kind != "modified" {
			t.Errorf("%s: kind %s", c.Path, c.Kind)
		}
		got = append(got, c.Path)
	}
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("review lists %q, want %q", got, want)
	}

	mustOK(t, airlock(t, o, "review", "apply", ws), "review apply")
	isWant := map[string]bool{}
	for _, p := range want {
		isWant[p] = true
	}
	changed := 0
	for i := 0; i < files; i++ {
		p := wstest.Path(i)
		b, err := os.ReadFile(filepath.Join(ws, p))
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(p) + "\n"
		switch {
		case isWant[p] && string(b) == name+"changed\n":
			changed++
		case isWant[p] || string(b) != name:
			t.Errorf("%s after the apply: %q", p, b)
		}
	}
	if changed != 10 {
		t.Errorf("%d files changed by the apply, want 10", changed)
	}
}
