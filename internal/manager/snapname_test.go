package manager

import (
	"regexp"
	"strings"
	"testing"
)

// TestSnapName: the hand-written check accepts exactly what the documented
// pattern does.
func TestSnapName(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	cases := []string{"", "a", "A9", "first", "v1.2_3-x", ".a", "-a", "_a", "a b", "a/b", "é", "a\x00",
		strings.Repeat("a", 128), strings.Repeat("a", 129), "a" + strings.Repeat(".", 127), "snap-1"}
	for _, c := range cases {
		if got, want := snapName(c), re.MatchString(c); got != want {
			t.Errorf("snapName(%q) = %v, the pattern says %v", c, got, want)
		}
	}
}
