package main

import (
	"math"
	"math/rand"
	"testing"
)

func seq(lo, hi int) []float64 {
	var s []float64
	for i := lo; i <= hi; i++ {
		s = append(s, float64(i))
	}
	return s
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{7}, 7},
		{[]float64{1, 2}, 1.5},
		{[]float64{1, 2, 3}, 2},
		{seq(1, 10), 5.5},
		{seq(1, 11), 6},
		{seq(1, 100), 50.5},
		{[]float64{1, 1, 1, 100}, 1},
		{[]float64{0.5, 0.5, 3, 9, 1000}, 3},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Errorf("median(nil) is not NaN")
	}
}

func TestPercentileNearestRank(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		p    int
		want float64
	}{
		{[]float64{42}, 95, 42},
		{[]float64{42}, 50, 42},
		{[]float64{1, 2}, 50, 1},
		{[]float64{1, 2}, 95, 2},
		// The classic nearest-rank example (Wikipedia).
		{[]float64{15, 20, 35, 40, 50}, 5, 15},
		{[]float64{15, 20, 35, 40, 50}, 30, 20},
		{[]float64{15, 20, 35, 40, 50}, 40, 20},
		{[]float64{15, 20, 35, 40, 50}, 50, 35},
		{[]float64{15, 20, 35, 40, 50}, 100, 50},
		{seq(1, 10), 95, 10}, // ceil(9.5) = 10
		{seq(1, 10), 90, 9},
		{seq(1, 20), 95, 19}, // exactly 19: no float rounding up to 20
		{seq(1, 60), 95, 57},
		{seq(1, 100), 95, 95},
		{seq(1, 100), 50, 50},
		{seq(1, 100), 100, 100},
		{seq(1, 100), 1, 1},
		{seq(1, 101), 95, 96}, // ceil(95.95) = 96
		{seq(1, 50), 95, 48},  // ceil(47.5) = 48
	} {
		if got := percentile(c.in, c.p); got != c.want {
			t.Errorf("percentile(%v, %d) = %v, want %v", c.in, c.p, got, c.want)
		}
	}
	for _, p := range []int{0, -1, 101} {
		if !math.IsNaN(percentile(seq(1, 10), p)) {
			t.Errorf("percentile(_, %d) is not NaN", p)
		}
	}
	if !math.IsNaN(percentile(nil, 95)) {
		t.Errorf("percentile(nil, 95) is not NaN")
	}
}

// The nearest-rank percentile is always one of the samples, and at least p%
// of the samples are <= it while fewer than p% are < it.
func TestPercentileProperty(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for n := 1; n <= 300; n++ {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(r.Intn(50))
		}
		s := sorted(xs)
		for _, p := range []int{1, 5, 50, 90, 95, 99, 100} {
			v := percentile(s, p)
			le, lt := 0, 0
			for _, x := range s {
				if x <= v {
					le++
				}
				if x < v {
					lt++
				}
			}
			if le*100 < p*n || lt*100 >= p*n {
				t.Fatalf("n=%d p=%d: value %v has %d <= and %d < of %d", n, p, v, le, lt, n)
			}
		}
	}
}

func TestSummarize(t *testing.T) {
	in := []float64{5, 1, 4, 2, 3, 100}
	orig := append([]float64(nil), in...)
	s := summarize(in)
	want := summary{N: 6, Median: 3.5, P95: 100, Min: 1, Max: 100, Mean: 115.0 / 6}
	if s != want {
		t.Errorf("summarize(%v) = %+v, want %+v", in, s, want)
	}
	for i := range in {
		if in[i] != orig[i] {
			t.Fatalf("summarize modified its input: %v", in)
		}
	}
	if (summarize(nil) != summary{}) {
		t.Errorf("summarize(nil) is not the zero summary")
	}
}
