package main

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestAB runs two real programs alternately and checks the table names
// both, with as many pairs as asked; a program that fails stops it.
func TestAB(t *testing.T) {
	tr, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	var out strings.Builder
	if err := ab(&out, 5, [2]string{tr, sh}, []string{"-c", "exit 0"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"5 alternating pairs", "A ", "B ", tr, sh, "B faster in"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The figures are medians of sorted samples: each p95 at least its p50.
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && (f[0] == "A" || f[0] == "B") {
			p50w, p95w, p50c, p95c := msOf(t, f[1]), msOf(t, f[2]), msOf(t, f[3]), msOf(t, f[4])
			if p95w < p50w || p95c < p50c {
				t.Errorf("p95 below p50: %s", line)
			}
		}
	}
	// The control: a failing run is an error, not a figure.
	if err := ab(&out, 2, [2]string{tr, sh}, []string{"-c", "exit 3"}); err == nil {
		t.Error("a run that exited 3 was timed")
	}
}

func msOf(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "ms"), 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}
