package native

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/runtime"
)

// A --ro, --rw or --bind source that is not on the host is refused with
// what it is; an existing one is listed.
func TestBindMountsMissingSource(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "not-there")
	for _, c := range []struct {
		what string
		spec runtime.Spec
	}{
		{"read-only path", runtime.Spec{ReadOnly: []string{missing}}},
		{"writable path", runtime.Spec{Writable: []string{missing}}},
		{"bind source", runtime.Spec{Binds: []runtime.Bind{{Source: missing, Target: "/x"}}}},
	} {
		if _, err := bindMounts(&c.spec); err == nil || !strings.Contains(err.Error(), c.what) || !strings.Contains(err.Error(), missing) {
			t.Errorf("%s missing: %v", c.what, err)
		}
	}
	// Control: the same entries with a source that exists.
	there := t.TempDir()
	got, err := bindMounts(&runtime.Spec{ReadOnly: []string{there}, Writable: []string{there}, Binds: []runtime.Bind{{Source: there, Target: "/x", Writable: true}}})
	if err != nil || len(got) != 3 || !got[0].Dir || got[0].Writable || !got[1].Writable || got[2].Target != "/x" {
		t.Fatalf("existing sources: %+v %v", got, err)
	}
}
