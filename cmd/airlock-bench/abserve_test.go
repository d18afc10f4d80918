package main

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestABPairs: the two measurements alternate which goes first pair by
// pair, every value lands on its own side, the table reports their
// medians and how often B won; a failed measurement stops it with the
// binary's name.
func TestABPairs(t *testing.T) {
	var calls []string
	a := []float64{5, 7, 6, 9}
	b := []float64{4, 8, 3, 2}
	ia, ib := 0, 0
	measure := [2]func() ([]float64, error){
		func() ([]float64, error) { calls = append(calls, "A"); ia++; return []float64{a[ia-1]}, nil },
		func() ([]float64, error) { calls = append(calls, "B"); ib++; return []float64{b[ib-1]}, nil },
	}
	var out strings.Builder
	if err := abPairs(&out, 4, [2]string{"old", "new"}, "a thing", []string{""}, measure); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(calls, ""); got != "ABBAABBA" {
		t.Errorf("order %s, want ABBAABBA", got)
	}
	// Medians of 4 sorted values: A {5 6 7 9} -> 6.5, B {2 3 4 8} -> 3.5;
	// B was lower in three pairs of four.
	for _, want := range []string{"4 alternating pairs of: a thing", "B - A: -3.00 ms (medians); B faster in 3/4 pairs"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	rows := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) == 4 {
			rows[f[0]] = strings.Join(f[1:], " ")
		}
	}
	// p95 of four values is the largest.
	if rows["A"] != "6.50ms 9.00ms old" || rows["B"] != "3.50ms 8.00ms new" {
		t.Errorf("rows %q:\n%s", rows, out.String())
	}

	// Two metrics: each has its columns, its difference and its count.
	two := [2]func() ([]float64, error){
		func() ([]float64, error) { return []float64{2, 1}, nil },
		func() ([]float64, error) { return []float64{1, 3}, nil },
	}
	out.Reset()
	if err := abPairs(&out, 2, [2]string{"old", "new"}, "two", []string{"wall", "CPU"}, two); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"wall p50", "CPU p95", "B - A: wall -1.00 ms, CPU +2.00 ms (medians); B faster in 2/2 pairs by wall, 0/2 pairs by CPU"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// The control: a failure is an error naming the build, not a figure.
	boom := errors.New("boom")
	measure[0] = func() ([]float64, error) { return []float64{1}, nil }
	measure[1] = func() ([]float64, error) { return nil, boom }
	err := abPairs(io.Discard, 2, [2]string{"old", "new"}, "a thing", []string{""}, measure)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "new") {
		t.Errorf("err = %v, want boom from new", err)
	}
}

// TestABServeUsage: arguments it cannot run with are refused (exit 2)
// before any daemon starts.
func TestABServeUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"only-one"},
		{"a", "b", "c"},
		{"-runtime", "kvm", "a", "b"},
		{"-n", "0", "a", "b"},
		{"-pause", "-1s", "a", "b"},
	} {
		if code := runABServe(args); code != 2 {
			t.Errorf("ab-serve %q: exit %d, want 2", args, code)
		}
	}
}
