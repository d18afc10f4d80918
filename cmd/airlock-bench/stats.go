package main

import (
	"math"
	"sort"
)

// summary is the description of one set of samples, all in milliseconds.
type summary struct {
	N      int     `json:"runs"`
	Median float64 `json:"median_ms"`
	P95    float64 `json:"p95_ms"`
	Min    float64 `json:"min_ms"`
	Max    float64 `json:"max_ms"`
	Mean   float64 `json:"mean_ms"`
}

// summarize computes the summary of xs without modifying it. An empty input
// gives the zero summary.
func summarize(xs []float64) summary {
	if len(xs) == 0 {
		return summary{}
	}
	s := sorted(xs)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return summary{
		N:      len(s),
		Median: median(s),
		P95:    percentile(s, 95),
		Min:    s[0],
		Max:    s[len(s)-1],
		Mean:   sum / float64(len(s)),
	}
}

// sorted returns a sorted copy of xs.
func sorted(xs []float64) []float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s
}

// median of the sorted samples s: the middle value, or the mean of the two
// middle values when len(s) is even. NaN for no samples.
func median(s []float64) float64 {
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile returns the p-th percentile (0 < p <= 100) of the sorted samples
// s by the nearest-rank method: the smallest sample such that at least p% of
// the samples are less than or equal to it, i.e. s[ceil(p*n/100)-1]. The
// rank is computed in integers, so that 95% of 20 samples is rank 19 exactly
// and not 20 by a floating-point rounding error. NaN for no samples.
func percentile(s []float64, p int) float64 {
	n := len(s)
	if n == 0 || p <= 0 || p > 100 {
		return math.NaN()
	}
	rank := (p*n + 99) / 100 // ceil(p*n/100)
	if rank < 1 {
		rank = 1
	}
	return s[rank-1]
}
