package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

func TestNetworkQuery(t *testing.T) {
	f := false
	q := NetworkQuery{Allowed: &f, Host: "a.test", Since: time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600)), Cursor: "42", Limit: 7}.query()
	if got, want := q.Encode(), "allowed=false&cursor=42&host=a.test&limit=7&since=2025-01-02T02%3A04%3A05.000000006Z"; got != want {
		t.Errorf("query = %q, want %q", got, want)
	}
	if got := (NetworkQuery{}).query().Encode(); got != "" {
		t.Errorf("empty query = %q", got)
	}
}

// fakeNetwork serves GET .../network?follow=true from a list of events:
// the first connection breaks after two events, a later one ends
// cleanly after the last; every connection starts after ?cursor=.
type fakeNetwork struct {
	mu      sync.Mutex
	conns   int
	cursors []string
	sse     []bool
}

func (f *fakeNetwork) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.conns++
	n := f.conns
	cur := r.URL.Query().Get("cursor")
	sse := r.Header.Get("Accept") == "text/event-stream"
	if sse && cur == "" {
		cur = r.Header.Get("Last-Event-ID")
	}
	f.cursors = append(f.cursors, cur)
	f.sse = append(f.sse, sse)
	f.mu.Unlock()
	if r.URL.Query().Get("follow") != "true" || r.URL.Query().Get("allowed") != "false" {
		http.Error(w, "bad query "+r.URL.RawQuery, 400)
		return
	}
	after, _ := strconv.Atoi(cur)
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.WriteHeader(200)
	sent := 0
	for id := after + 1; id <= 5; id++ {
		if n == 1 && sent == 2 {
			// Break the connection in the middle of the stream.
			w.(http.Flusher).Flush()
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
			return
		}
		if sse {
			fmt.Fprintf(w, "id: %d\ndata: {\"host\":\"h%d.test\",\"port\":443}\n\n", id, id)
		} else {
			fmt.Fprintf(w, "{\"cursor\":\"%d\",\"host\":\"h%d.test\",\"port\":443}\n", id, id)
		}
		sent++
	}
}

// FollowNetwork resumes a broken stream from the last cursor it delivered,
// so every event arrives once, and returns nil at the stream's clean end.
func TestFollowNetworkReconnects(t *testing.T) {
	f := &fakeNetwork{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, err := New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	denied := false
	var got []string
	err = c.FollowNetwork(context.Background(), "sb-0123456789abcdef", NetworkQuery{Allowed: &denied, Limit: 3}, func(ev api.NetworkEvent) error {
		got = append(got, ev.Cursor+"="+ev.Host)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1=h1.test 2=h2.test 3=h3.test 4=h4.test 5=h5.test]" {
		t.Fatalf("events: %v", got)
	}
	if fmt.Sprint(f.cursors) != "[ 2]" {
		t.Fatalf("connections started at cursors %q, want [\"\" \"2\"]", f.cursors)
	}

	// SSE: the id is the cursor; Last-Event-ID resumes.
	s, err := c.NetworkStream(context.Background(), "sb-0123456789abcdef", NetworkQuery{Allowed: &denied, Cursor: "3"}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, want := range []string{"4", "5"} {
		ev, err := s.Next()
		if err != nil || ev.Cursor != want || s.Cursor() != want {
			t.Fatalf("SSE event: %+v %v, want cursor %s", ev, err, want)
		}
	}
	if _, err := s.Next(); err == nil {
		t.Fatal("SSE stream did not end")
	}
	if !f.sse[len(f.sse)-1] || f.cursors[len(f.cursors)-1] != "3" {
		t.Fatalf("SSE request: sse %v cursors %q", f.sse, f.cursors)
	}

	// An error from fn ends it, as is.
	stop := errors.New("stop")
	if err := c.FollowNetwork(context.Background(), "sb-0123456789abcdef", NetworkQuery{Allowed: &denied, Cursor: "4"}, func(api.NetworkEvent) error { return stop }); err != stop {
		t.Fatalf("fn's error: %v", err)
	}
}

// An error line ends a stream with an *Error matching its code.
func TestNetworkStreamErrorLine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintf(w, "{\"cursor\":\"1\",\"host\":\"a.test\",\"error_message\":\"gateway closed\",\"error\":\"not an object\"}\n{\"error\":{\"code\":\"not_found\",\"message\":\"gone\"}}\n")
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "")
	s, err := c.NetworkStream(context.Background(), "sb-0123456789abcdef", NetworkQuery{}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ev, err := s.Next(); err != nil || ev.Host != "a.test" || ev.Error != "gateway closed" {
		t.Fatalf("first: %+v %v", ev, err)
	}
	if _, err := s.Next(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("error line: %v", err)
	}
}
