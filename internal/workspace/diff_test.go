package workspace

import (
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

// applyUnified applies a unified diff made by UnifiedDiff to old.
func applyUnified(t *testing.T, old, diff string) string {
	t.Helper()
	a := splitLines(old)
	lines := strings.Split(strings.TrimSuffix(diff, "\n"), "\n")
	var out []string
	next := 0 // next line of a not yet copied
	for i := 2; i < len(lines); i++ {
		l := lines[i]
		if l == `\ No newline at end of file` {
			continue
		}
		noEOL := i+1 < len(lines) && lines[i+1] == `\ No newline at end of file`
		body := ""
		if len(l) > 0 {
			body = l[1:]
		}
		if noEOL {
			body += "\n"
		}
		if strings.HasPrefix(l, "@@ ") {
			f := strings.Fields(l)
			r := strings.Split(strings.TrimPrefix(f[1], "-"), ",")
			start, _ := strconv.Atoi(r[0])
			n := 1
			if len(r) == 2 {
				n, _ = strconv.Atoi(r[1])
			}
			if n > 0 {
				start--
			}
			for next < start {
				out = append(out, a[next])
				next++
			}
			continue
		}
		switch l[0] {
		case ' ', '-':
			if a[next] != body {
				t.Fatalf("mismatch at %d: %q vs %q", next, a[next], body)
			}
			if l[0] == ' ' {
				out = append(out, body)
			}
			next++
		case '+':
			out = append(out, body)
		default:
			t.Fatalf("bad diff line %q", l)
		}
	}
	out = append(out, a[next:]...)
	var sb strings.Builder
	for _, l := range out {
		if s, ok := strings.CutSuffix(l, "\n"); ok {
			sb.WriteString(s)
		} else {
			sb.WriteString(l + "\n")
		}
	}
	return sb.String()
}

func lcs(a, b []string) int {
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	return dp[0][0]
}

// Random pairs: each diff applied to the old text gives the new one, and
// the edit script is as short as the longest common subsequence allows.
func TestUnifiedDiffRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	text := func() string {
		n := rng.Intn(30)
		var sb strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&sb, "l%d\n", rng.Intn(6))
		}
		s := sb.String()
		if s != "" && rng.Intn(4) == 0 {
			s = strings.TrimSuffix(s, "\n")
		}
		return s
	}
	for i := 0; i < 2000; i++ {
		a, b := text(), text()
		d := UnifiedDiff("a/f", "b/f", a, b)
		if a == b {
			if d != "" {
				t.Fatalf("diff of equal texts: %q", d)
			}
			continue
		}
		if got := applyUnified(t, a, d); got != b {
			t.Fatalf("case %d: applying\n%s\nto %q gives %q, want %q", i, d, a, got, b)
		}
		al, bl := splitLines(a), splitLines(b)
		edits := 0
		for _, o := range diffLines(al, bl) {
			if o.kind != opEqual {
				edits++
			}
		}
		if want := len(al) + len(bl) - 2*lcs(al, bl); edits != want {
			t.Fatalf("case %d: %d edits, shortest is %d", i, edits, want)
		}
	}
}

func TestUnifiedDiffGolden(t *testing.T) {
	old := "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n"
	new := "a\nb\nc\nD\ne\nf\ng\nh\ni\nj\nk"
	want := `--- a/x
+++ b/x
@@ -1,10 +1,11 @@
 a
 b
 c
-d
+D
 e
 f
 g
 h
 i
 j
+k
\ No newline at end of file
`
	if got := UnifiedDiff("a/x", "b/x", old, new); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	want2 := "--- a/x\n+++ b/x\n@@ -0,0 +1,2 @@\n+x\n+y\n"
	if got := UnifiedDiff("a/x", "b/x", "", "x\ny\n"); got != want2 {
		t.Errorf("got\n%s\nwant\n%s", got, want2)
	}
}
