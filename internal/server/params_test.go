package server

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A number of seconds past what a time.Duration holds is capped at the
// maximum (it wrapped to a negative wait that returned at once); one below
// is taken as it is.
func TestSecondsParamHuge(t *testing.T) {
	for _, v := range []string{"1e10", "9300000000", "Inf", "1e300"} {
		r := httptest.NewRequest("GET", "/x?timeout_seconds="+v, nil)
		d, err := secondsParam(r, "timeout_seconds", time.Second, 300*time.Second)
		if err != nil || d != 300*time.Second {
			t.Errorf("timeout_seconds=%s: %v %v, want 5m0s", v, d, err)
		}
	}
	r := httptest.NewRequest("GET", "/x?timeout_seconds=2.5", nil)
	if d, err := secondsParam(r, "timeout_seconds", time.Second, 300*time.Second); err != nil || d != 2500*time.Millisecond {
		t.Errorf("control, 2.5: %v %v", d, err)
	}
}

// since= outside what the store's nanosecond times hold is a bad request
// (it was a 500 from the store); a time inside is taken.
func TestSinceOutOfRange(t *testing.T) {
	for _, v := range []string{"9999-12-31T23:59:59Z", "1600-01-01T00:00:00Z", "2262-04-12T00:00:00Z"} {
		_, err := parseEventParams(httptest.NewRequest("GET", "/x?since="+v, nil))
		if err == nil || !strings.Contains(err.Error(), "between the years") {
			t.Errorf("since=%s: %v", v, err)
		}
	}
	ep, err := parseEventParams(httptest.NewRequest("GET", "/x?since=2026-01-02T03:04:05Z", nil))
	if err != nil || ep.since.Year() != 2026 {
		t.Errorf("control: %+v %v", ep, err)
	}
}
