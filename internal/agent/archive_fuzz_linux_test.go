package agent

import (
	"path"
	"strings"
	"testing"
)

// FuzzEntryName: an accepted tar entry name is relative, clean, has no ".."
// component and no NUL, and fits PATH_MAX; the seeds run as a unit test.
func FuzzEntryName(f *testing.F) {
	for _, s := range []string{"a.txt", "dir/", "./x", "../../etc/cron.d/x", "/etc/passwd", "%2e%2e/x",
		"a/../../b", "a/./b//c", "x\x00y", ".", "..", strings.Repeat("n", 4097), "a/..", "..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := entryName(name)
		if err != nil {
			return
		}
		if path.IsAbs(got) || strings.ContainsRune(got, 0) || len(got) > maxPath || path.Clean(got) != got || got == "." {
			t.Fatalf("entryName(%q) = %q", name, got)
		}
		for _, part := range strings.Split(got, "/") {
			if part == ".." {
				t.Fatalf("entryName(%q) = %q keeps a .. component", name, got)
			}
		}
	})
}

func TestEntryNameRefusals(t *testing.T) {
	for _, bad := range []string{"../x", "a/../../x", "/abs", "x\x00y", "", strings.Repeat("n", 4097), "a/.."} {
		if got, err := entryName(bad); err == nil {
			t.Errorf("entryName(%q) = %q, want a refusal", bad, got)
		}
	}
	for in, want := range map[string]string{"a/./b//c": "a/b/c", "dir/": "dir", "%2e%2e/x": "%2e%2e/x", "...": "..."} {
		if got, err := entryName(in); err != nil || got != want {
			t.Errorf("control entryName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
