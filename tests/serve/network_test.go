//go:build linux

package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// netHosts maps the names the tests use to the loopback address their
// servers listen on.
const netHosts = "egress_hosts:\n  api.test: [127.0.0.1]\n  other.test: [127.0.0.1]\n"

// netPolicy allows api.test (and the loopback address it resolves to,
// which the gateway otherwise refuses) and nothing else.
const netPolicy = "network:\n  mode: allowlist\n  allow: [api.test, 127.0.0.1]\n"

// upstream is a loopback HTTP server: /stream?id=X sends 1 KiB every
// 20 ms for up to a minute and records, per id, how much it sent and when
// the client went away; anything else answers "hello HOST PATH".
type upstream struct {
	*httptest.Server
	port  string
	mu    sync.Mutex
	conns map[string]*upConn
}

type upConn struct {
	chunks  atomic.Int64
	started chan struct{}
	ended   chan struct{}
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{conns: map[string]*upConn{}}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	pu, _ := url.Parse(u.URL)
	u.port = pu.Port()
	return u
}

func (u *upstream) conn(id string) *upConn {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.conns[id]
	if c == nil {
		c = &upConn{started: make(chan struct{}), ended: make(chan struct{})}
		u.conns[id] = c
	}
	return c
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/stream" {
		fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
		return
	}
	c := u.conn(r.URL.Query().Get("id"))
	close(c.started)
	defer close(c.ended)
	chunk := []byte(strings.Repeat("x", 1024))
	rc := http.NewResponseController(w)
	deadline := time.After(time.Minute)
	for {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		c.chunks.Add(1)
		select {
		case <-r.Context().Done():
			return
		case <-deadline:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// allEvents lists a sandbox's whole audit through the API, page by page.
func allEvents(t *testing.T, d *daemon, id string, q client.NetworkQuery) []api.NetworkEvent {
	t.Helper()
	var out []api.NetworkEvent
	for range 100 {
		page, err := d.c.NetworkEvents(ctxT(t), id, q)
		if err != nil {
			t.Fatalf("network events %+v: %v", q, err)
		}
		out = append(out, page.Events...)
		if page.NextCursor == "" {
			return out
		}
		q.Cursor = page.NextCursor
	}
	t.Fatal("more than 100 pages")
	return nil
}

// waitEvents waits (bounded) until the audit holds n events.
func waitEvents(t *testing.T, d *daemon, id string, n int) []api.NetworkEvent {
	t.Helper()
	var evs []api.NetworkEvent
	eventually(t, 15*time.Second, fmt.Sprintf("%d network events", n), func() bool {
		evs = allEvents(t, d, id, client.NetworkQuery{})
		return len(evs) >= n
	})
	if len(evs) != n {
		t.Fatalf("%d network events, want exactly %d: %+v", len(evs), n, evs)
	}
	return evs
}

func cursors(evs []api.NetworkEvent) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, e.Cursor)
	}
	return out
}

// curl is the shell line of one request from inside a sandbox, printing
// the HTTP status (000 when the request failed).
func curl(args string) string {
	return "curl -s -m 10 -o /dev/null -w '%{http_code} ' " + args + "; "
}

// TestNetworkAudit: every request a sandbox makes through its gateway,
// allowed or denied, plain HTTP or SOCKS, is one event of GET .../network
// with the right fields; filters and cursor pages select exactly the
// right ones; a follow stream (NDJSON) gets a request made after it
// started; SSE resumes from Last-Event-ID without loss or repeat; the
// stream ends when the sandbox is deleted.
func TestNetworkAudit(t *testing.T) {
	up := newUpstream(t)
	d := startDaemon(t, netHosts)
	sb := d.create(t, &api.CreateSandboxRequest{Policy: netPolicy})
	p := up.port
	start := time.Now()
	out := d.sh(t, sb.ID, curl("'http://api.test:"+p+"/a?token=secret'")+curl("http://api.test:"+p+"/b")+
		curl("http://other.test:"+p+"/c")+curl("--socks5-hostname 127.0.0.1:1080 http://api.test:"+p+"/s")+"true")
	if out != "200 200 403 200 " {
		t.Fatalf("first requests: %q", out)
	}
	mid := time.Now()
	out = d.sh(t, sb.ID, curl("http://api.test:"+p+"/d")+curl("http://other.test:"+p+"/e")+
		curl("--socks5-hostname 127.0.0.1:1080 http://other.test:"+p+"/f")+"true")
	if out != "200 403 000 " {
		t.Fatalf("second requests: %q", out)
	}
	evs := waitEvents(t, d, sb.ID, 7)
	end := time.Now()

	// Ids are cursors: increasing. Requests ran one after the other, so by
	// start time they are in the order made.
	cs := cursors(evs)
	for i := 1; i < len(cs); i++ {
		if atoi(cs[i]) <= atoi(cs[i-1]) {
			t.Fatalf("cursors not increasing: %v", cs)
		}
	}
	byTime := slices.Clone(evs)
	sort.SliceStable(byTime, func(i, j int) bool { return byTime[i].Time.Before(byTime[j].Time) })
	type want struct {
		proto, method, host, path string
		allowed                   bool
	}
	wants := []want{
		{"http", "GET", "api.test", "/a", true},
		{"http", "GET", "api.test", "/b", true},
		{"http", "GET", "other.test", "/c", false},
		{"socks", "CONNECT", "api.test", "", true},
		{"http", "GET", "api.test", "/d", true},
		{"http", "GET", "other.test", "/e", false},
		{"socks", "CONNECT", "other.test", "", false},
	}
	for i, w := range wants {
		e := byTime[i]
		got := want{e.Proto, e.Method, e.Host, e.Path, e.Allowed}
		if got != w || e.Port != atoi(p) || e.Rule == "" || e.Time.Before(start.Add(-time.Second)) || e.Time.After(end) || e.DurationMs < 0 {
			t.Errorf("event %d: %+v, want %+v on port %s with a rule", i, e, w, p)
		}
		if w.allowed && (e.Addr != "127.0.0.1:"+p || e.BytesDown == 0) {
			t.Errorf("event %d (allowed): addr %q, bytes down %d", i, e.Addr, e.BytesDown)
		}
		if strings.Contains(e.Path, "token") {
			t.Errorf("event %d records the query string: %q", i, e.Path)
		}
	}

	// Filters, alone and combined.
	no, yes := false, true
	count := func(q client.NetworkQuery, want int) {
		t.Helper()
		if got := allEvents(t, d, sb.ID, q); len(got) != want {
			t.Errorf("%+v: %d events, want %d: %+v", q, len(got), want, got)
		}
	}
	count(client.NetworkQuery{Allowed: &no}, 3)
	count(client.NetworkQuery{Allowed: &yes}, 4)
	count(client.NetworkQuery{Host: "other.test"}, 3)
	count(client.NetworkQuery{Host: "OTHER.test."}, 3)
	count(client.NetworkQuery{Host: "nowhere.test"}, 0)
	count(client.NetworkQuery{Since: mid}, 3)
	count(client.NetworkQuery{Since: mid, Allowed: &no, Host: "other.test"}, 2)
	count(client.NetworkQuery{Cursor: evs[4].Cursor}, 2)

	// Pages of 2: 2, 2, 2, 1; the last one without a next cursor.
	var paged []string
	q := client.NetworkQuery{Limit: 2}
	for i := 0; ; i++ {
		page, err := d.c.NetworkEvents(ctxT(t), sb.ID, q)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, cursors(page.Events)...)
		if page.NextCursor == "" {
			if i != 3 || len(page.Events) != 1 {
				t.Fatalf("page %d is the last with %d events", i, len(page.Events))
			}
			break
		}
		if len(page.Events) != 2 || page.NextCursor != page.Events[1].Cursor {
			t.Fatalf("page %d: %d events, next cursor %q", i, len(page.Events), page.NextCursor)
		}
		q.Cursor = page.NextCursor
	}
	if !slices.Equal(paged, cs) {
		t.Fatalf("paged cursors %v, want %v", paged, cs)
	}

	// Bad input: 400 with a message; unknown sandbox: 404.
	for _, qs := range []string{"cursor=x", "cursor=-1", "limit=0", "limit=1001", "since=yesterday", "allowed=maybe", "problems=maybe", "follow=sometimes"} {
		resp, body := d.rawRequest(t, "GET", "/v1/sandboxes/"+sb.ID+"/network?"+qs, nil, nil)
		if resp.StatusCode != 400 || !strings.Contains(string(body), "invalid_argument") {
			t.Errorf("?%s: %d %s", qs, resp.StatusCode, body)
		}
	}
	_, err := d.c.NetworkEvents(ctxT(t), "sb-0000000000000000", client.NetworkQuery{})
	wantCode(t, "network events of a missing sandbox", err, 404)
	_, err = d.c.NetworkStream(ctxT(t), "sb-0000000000000000", client.NetworkQuery{}, false)
	wantCode(t, "network stream of a missing sandbox", err, 404)

	// Follow (NDJSON): the stream is open (the daemon answered) before the
	// request is made; the event arrives without polling.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := d.c.NetworkStream(ctx, sb.ID, client.NetworkQuery{Cursor: cs[6]}, false)
	if err != nil {
		t.Fatal(err)
	}
	if out := d.sh(t, sb.ID, curl("http://api.test:"+p+"/after")); out != "200 " {
		t.Fatalf("request after the stream started: %q", out)
	}
	ev, err := s.Next()
	if err != nil || ev.Path != "/after" || !ev.Allowed {
		t.Fatalf("follow stream: %+v %v", ev, err)
	}
	s.Close()
	cs = append(cs, ev.Cursor)

	// SSE: Last-Event-ID alone (no ?cursor=) resumes right after it.
	got := readSSE(t, d, sb.ID, cs[2], 5)
	if !slices.Equal(cursors(got), cs[3:8]) {
		t.Fatalf("SSE from Last-Event-ID %s: %v, want %v", cs[2], cursors(got), cs[3:8])
	}
	if out := d.sh(t, sb.ID, curl("http://other.test:"+p+"/later")); out != "403 " {
		t.Fatalf("later request: %q", out)
	}
	got = readSSE(t, d, sb.ID, cs[7], 1)
	if got[0].Path != "/later" || got[0].Allowed {
		t.Fatalf("SSE resumed after the last event: %+v", got[0])
	}
	if n := d.metric(t, "airlock_egress_audit_dropped_total"); n != 0 {
		t.Fatalf("%v audit records dropped", n)
	}

	// Deleting the sandbox ends an open stream cleanly.
	s, err = d.c.NetworkStream(ctx, sb.ID, client.NetworkQuery{Cursor: got[0].Cursor}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if ev, err := s.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream after the sandbox was deleted: %+v %v, want its clean end", ev, err)
	}
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// readSSE reads n events of GET .../network?follow=true as Server-Sent
// Events, resuming with only the Last-Event-ID header; each event's id
// must be its cursor.
func readSSE(t *testing.T, d *daemon, id, lastID string, n int) []api.NetworkEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
	}}}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://airlock/v1/sandboxes/"+id+"/network?follow=true", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", lastID)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("SSE: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []api.NetworkEvent
	sc := bufio.NewScanner(resp.Body)
	evID := ""
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			evID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			var ev api.NetworkEvent
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("SSE data %q: %v", line, err)
			}
			if ev.Cursor != evID {
				t.Fatalf("SSE id %q, event cursor %q", evID, ev.Cursor)
			}
			out = append(out, ev)
		}
	}
	if len(out) < n {
		t.Fatalf("SSE: %d of %d events (%v)", len(out), n, sc.Err())
	}
	return out
}

// TestNetworkPolicy: a denied host becomes reachable when a PUT allows it
// and unreachable again when a PUT denies it; a bad rule or mode is a 400
// that leaves the policy alone; a sandbox created with mode none refuses
// any other mode (409); GET reflects every change, and so does the store
// across a daemon restart.
func TestNetworkPolicy(t *testing.T) {
	up := newUpstream(t)
	d := startDaemon(t, netHosts)
	sb := d.create(t, &api.CreateSandboxRequest{Policy: netPolicy})
	ctx := ctxT(t)
	reach := curl("http://api.test:"+up.port+"/") + curl("http://other.test:"+up.port+"/")
	get := func() api.NetworkPolicy {
		t.Helper()
		np, err := d.c.NetworkPolicy(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		return *np
	}
	set := func(np api.NetworkPolicy) api.NetworkPolicy {
		t.Helper()
		got, err := d.c.SetNetworkPolicy(ctx, sb.ID, np)
		if err != nil {
			t.Fatalf("set %+v: %v", np, err)
		}
		return *got
	}
	created := api.NetworkPolicy{Mode: "allowlist", Allow: []string{"api.test", "127.0.0.1"}}
	if np := get(); !equalPolicy(np, created) {
		t.Fatalf("policy as created: %+v", np)
	}
	if out := d.sh(t, sb.ID, reach); out != "200 403 " {
		t.Fatalf("as created: %q", out)
	}
	// Positive control: allowing other.test lets it through.
	open := api.NetworkPolicy{Mode: "allowlist", Allow: []string{"api.test", "other.test", "127.0.0.1"}}
	if np := set(open); !equalPolicy(np, open) || !equalPolicy(get(), open) {
		t.Fatalf("after allowing other.test: %+v", get())
	}
	if out := d.sh(t, sb.ID, reach); out != "200 200 " {
		t.Fatalf("after allowing other.test: %q", out)
	}
	// Denied again.
	closed := api.NetworkPolicy{Mode: "allowlist", Allow: []string{"api.test", "other.test", "127.0.0.1"}, Deny: []string{"other.test"}}
	set(closed)
	if out := d.sh(t, sb.ID, reach); out != "200 403 " {
		t.Fatalf("after denying other.test: %q", out)
	}
	evs := allEvents(t, d, sb.ID, client.NetworkQuery{Host: "other.test"})
	if last := evs[len(evs)-1]; last.Allowed || last.Rule == "" {
		t.Fatalf("denial audited as %+v", last)
	}
	// Bad input: 400, the policy unchanged (GET and behaviour).
	for _, bad := range []api.NetworkPolicy{
		{Mode: "allowlist", Allow: []string{"api.test", "*.com"}},
		{Mode: "allowlist", Deny: []string{"example.com:0"}},
		{Mode: "wide-open"},
		{Allow: []string{"api.test"}},
	} {
		_, err := d.c.SetNetworkPolicy(ctx, sb.ID, bad)
		wantCode(t, fmt.Sprintf("bad policy %+v", bad), err, 400)
	}
	_, err := d.c.SetNetworkPolicy(ctx, sb.ID, api.NetworkPolicy{Mode: "allowlist", Allow: []string{"*.com"}})
	if !strings.Contains(err.Error(), "*.com") {
		t.Fatalf("bad rule message does not name the rule: %v", err)
	}
	resp, body := d.rawRequest(t, "PUT", "/v1/sandboxes/"+sb.ID+"/network/policy", strings.NewReader(`{"mode":"open","alow":["x"]}`), nil)
	if resp.StatusCode != 400 {
		t.Fatalf("unknown field: %d %s", resp.StatusCode, body)
	}
	if np := get(); !equalPolicy(np, closed) {
		t.Fatalf("policy changed by refused PUTs: %+v", np)
	}
	if out := d.sh(t, sb.ID, reach); out != "200 403 " {
		t.Fatalf("after refused PUTs: %q", out)
	}
	// Mode none on a sandbox with a gateway: everything denied.
	set(api.NetworkPolicy{Mode: "none", Allow: []string{"api.test", "127.0.0.1"}})
	if out := d.sh(t, sb.ID, reach); out != "403 403 " {
		t.Fatalf("mode none: %q", out)
	}
	if np := get(); np.Mode != "none" {
		t.Fatalf("mode none not kept: %+v", np)
	}
	set(closed)

	// A sandbox created without network: no other mode (409), and no rule
	// either, which would never apply (409); none alone is fine.
	plain := d.create(t, nil)
	if np, err := d.c.NetworkPolicy(ctx, plain.ID); err != nil || np.Mode != "none" {
		t.Fatalf("policy of a no-network sandbox: %+v %v", np, err)
	}
	_, err = d.c.SetNetworkPolicy(ctx, plain.ID, api.NetworkPolicy{Mode: "allowlist", Allow: []string{"api.test"}})
	wantCode(t, "allowlist on a mode-none sandbox", err, 409)
	if !strings.Contains(err.Error(), "mode none") {
		t.Fatalf("409 does not say why: %v", err)
	}
	for name, np := range map[string]api.NetworkPolicy{
		"allow": {Mode: "none", Allow: []string{"api.test"}},
		"deny":  {Mode: "none", Deny: []string{"api.test"}},
		"http":  {Mode: "none", HTTP: []api.HTTPRule{{Hosts: []string{"api.test"}}}},
	} {
		_, err = d.c.SetNetworkPolicy(ctx, plain.ID, np)
		wantCode(t, "mode none with a rule ("+name+") on a mode-none sandbox", err, 409)
	}
	if _, err := d.c.SetNetworkPolicy(ctx, plain.ID, api.NetworkPolicy{Mode: "none"}); err != nil {
		t.Fatalf("none on a mode-none sandbox: %v", err)
	}
	if np, err := d.c.NetworkPolicy(ctx, plain.ID); err != nil || np.Mode != "none" || len(np.Allow)+len(np.Deny)+len(np.HTTP) != 0 {
		t.Fatalf("policy of the no-network sandbox after the refusals: %+v %v", np, err)
	}
	_, err = d.c.SetNetworkPolicy(ctx, "sb-0000000000000000", closed)
	wantCode(t, "policy of a missing sandbox", err, 404)

	// The store keeps the policy and the audit across a restart. A
	// download open at shutdown is audited too (the daemon closes the
	// gateways and stores their last records before it exits), and a
	// follower rides through the restart without a loss or a repeat.
	pr, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"curl", "-s", "-N", "-o", "/dev/null", "http://api.test:" + up.port + "/stream?id=shutdown"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-up.conn("shutdown").started:
	case <-time.After(20 * time.Second):
		t.Fatal("download did not start")
	}
	before := allEvents(t, d, sb.ID, client.NetworkQuery{})
	var mu sync.Mutex
	var followed []string
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(followed)
	}
	followErr := make(chan error, 1)
	fctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		followErr <- d.c.FollowNetwork(fctx, sb.ID, client.NetworkQuery{}, func(ev api.NetworkEvent) error {
			mu.Lock()
			followed = append(followed, ev.Cursor)
			mu.Unlock()
			return nil
		})
	}()
	eventually(t, 15*time.Second, "the follower to catch up", func() bool { return len(got()) == len(before) })
	stopped := time.Now()
	d.restart(syscall.SIGTERM)
	if took := time.Since(stopped); took > 8*time.Second {
		t.Errorf("restart with a network follower took %v (streams must end when the shutdown begins)", took)
	}
	if np := get(); !equalPolicy(np, closed) {
		t.Fatalf("policy after a restart: %+v", np)
	}
	after := allEvents(t, d, sb.ID, client.NetworkQuery{})
	if !slices.Equal(cursors(after[:len(before)]), cursors(before)) || len(after) != len(before)+1 {
		t.Fatalf("audit after a restart: %v, want %v and the download", cursors(after), cursors(before))
	}
	if last := after[len(after)-1]; last.Path != "/stream" || last.Error == "" || last.BytesDown == 0 {
		t.Fatalf("download open at shutdown audited as %+v", last)
	}
	d.c.WaitProcess(ctx, sb.ID, pr.ID, 10*time.Second)
	// The follower reconnects to the new daemon and gets the rest.
	eventually(t, 30*time.Second, "the follower to reconnect", func() bool {
		select {
		case err := <-followErr:
			t.Fatalf("follower ended across a restart: %v (got %v, want %v)", err, got(), cursors(after))
		default:
		}
		return len(got()) == len(after)
	})
	if err := d.c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-followErr:
		if err != nil {
			t.Fatalf("follower across a restart: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("follower still running 30s after the sandbox was deleted")
	}
	if f := got(); !slices.Equal(f, cursors(after)) {
		t.Fatalf("follower across a restart got %v, want %v", f, cursors(after))
	}
}

func equalPolicy(a, b api.NetworkPolicy) bool {
	return a.Mode == b.Mode && slices.Equal(a.Allow, b.Allow) && slices.Equal(a.Deny, b.Deny)
}

// TestNetworkPolicyClosesConnections: long downloads through the HTTP
// proxy and through SOCKS keep running across a PUT that still allows
// them (control), and end, audited as denied with the rule, when a PUT
// denies their host.
func TestNetworkPolicyClosesConnections(t *testing.T) {
	up := newUpstream(t)
	d := startDaemon(t, netHosts)
	sb := d.create(t, &api.CreateSandboxRequest{Policy: netPolicy})
	ctx := ctxT(t)
	u := "http://api.test:" + up.port + "/stream?id="
	procs := map[string]*api.Process{}
	for id, argv := range map[string][]string{
		"http":  {"curl", "-s", "-N", "-o", "/dev/null", u + "http"},
		"socks": {"curl", "-s", "-N", "-o", "/dev/null", "--socks5-hostname", "127.0.0.1:1080", u + "socks"},
	} {
		pr, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: argv})
		if err != nil {
			t.Fatal(err)
		}
		procs[id] = pr
	}
	conns := map[string]*upConn{"http": up.conn("http"), "socks": up.conn("socks")}
	for id, c := range conns {
		select {
		case <-c.started:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s download did not start", id)
		}
	}
	// advancing waits until every download got n more chunks, on the same
	// connection.
	advancing := func(what string, n int64) {
		t.Helper()
		for id, c := range conns {
			target := c.chunks.Load() + n
			eventually(t, 15*time.Second, fmt.Sprintf("%s download to go on %s", id, what), func() bool {
				select {
				case <-c.ended:
					t.Fatalf("%s download ended %s", id, what)
				default:
				}
				return c.chunks.Load() >= target
			})
		}
	}
	advancing("before any change", 5)
	// Control: a new policy that still allows api.test.
	if _, err := d.c.SetNetworkPolicy(ctx, sb.ID, api.NetworkPolicy{Mode: "allowlist", Allow: []string{"api.test", "127.0.0.1"}, Deny: []string{"other.test"}}); err != nil {
		t.Fatal(err)
	}
	advancing("after a PUT that still allows it", 20)
	for id, pr := range procs {
		if p, err := d.c.GetProcess(ctx, sb.ID, pr.ID); err != nil || p.State != api.ProcessRunning {
			t.Fatalf("%s curl after the allowing PUT: %+v %v", id, p, err)
		}
	}
	// Deny api.test: both transfers end.
	if _, err := d.c.SetNetworkPolicy(ctx, sb.ID, api.NetworkPolicy{Mode: "allowlist", Allow: []string{"api.test", "127.0.0.1"}, Deny: []string{"api.test"}}); err != nil {
		t.Fatal(err)
	}
	for id, c := range conns {
		select {
		case <-c.ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s download still running 10s after a PUT denied its host", id)
		}
	}
	for id, pr := range procs {
		p, err := d.c.WaitProcess(ctx, sb.ID, pr.ID, 20*time.Second)
		if err != nil || p.State != api.ProcessExited || p.ExitCode == nil || *p.ExitCode == 0 {
			t.Fatalf("%s curl after the denying PUT: %+v %v", id, p, err)
		}
	}
	// The audit records each closure: denied, by the deny rule, and why.
	var closed []api.NetworkEvent
	eventually(t, 15*time.Second, "the closures in the audit", func() bool {
		closed = nil
		for _, e := range allEvents(t, d, sb.ID, client.NetworkQuery{Host: "api.test"}) {
			if strings.Contains(e.Error, "policy") {
				closed = append(closed, e)
			}
		}
		return len(closed) == 2
	})
	protos := []string{}
	for _, e := range closed {
		protos = append(protos, e.Proto)
		if e.Allowed || !strings.Contains(e.Rule, "api.test") || e.BytesDown < 20*1024 {
			t.Errorf("closure audited as %+v", e)
		}
	}
	sort.Strings(protos)
	if !slices.Equal(protos, []string{"http", "socks"}) {
		t.Fatalf("closures of %v, want http and socks", protos)
	}
}

// TestNetworkCLI: airlock net lists the audit (table, JSON lines,
// filters), follows it until the sandbox is deleted, and shows and changes
// the policy; bad input is one line and a non-zero status.
func TestNetworkCLI(t *testing.T) {
	up := newUpstream(t)
	d := startDaemon(t, netHosts)
	sb := d.create(t, &api.CreateSandboxRequest{Policy: netPolicy})
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return cli(t, d, args...)
	}
	reach := curl("http://api.test:"+up.port+"/x") + curl("http://other.test:"+up.port+"/y")
	if out := d.sh(t, sb.ID, reach); out != "200 403 " {
		t.Fatalf("requests: %q", out)
	}
	waitEvents(t, d, sb.ID, 2)
	out, errs, code := run("net", sb.ID)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "TIME") ||
		!strings.Contains(lines[1], "allow") || !strings.Contains(lines[1], "api.test:"+up.port) || !strings.Contains(lines[1], "/x") ||
		!strings.Contains(lines[2], "deny") || !strings.Contains(lines[2], "other.test:"+up.port) {
		t.Fatalf("net table: %d %q %q", code, out, errs)
	}
	jsonLines := func(args ...string) []api.NetworkEvent {
		t.Helper()
		out, errs, code := run(append([]string{"net", sb.ID, "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("net --json %v: %d %q", args, code, errs)
		}
		var evs []api.NetworkEvent
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l == "" {
				continue
			}
			var e api.NetworkEvent
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("net --json %v: line %q: %v", args, l, err)
			}
			evs = append(evs, e)
		}
		return evs
	}
	if evs := jsonLines(); len(evs) != 2 {
		t.Fatalf("net --json: %+v", evs)
	}
	if evs := jsonLines("--denied"); len(evs) != 1 || evs[0].Host != "other.test" {
		t.Fatalf("net --denied: %+v", evs)
	}
	if evs := jsonLines("--problems"); len(evs) != 1 || evs[0].Host != "other.test" {
		t.Fatalf("net --problems: %+v", evs)
	}
	if evs := jsonLines("--dest", "api.test"); len(evs) != 1 || evs[0].Path != "/x" {
		t.Fatalf("net --dest: %+v", evs)
	}
	if evs := jsonLines("--since", "1h"); len(evs) != 2 {
		t.Fatalf("net --since 1h: %+v", evs)
	}
	if evs := jsonLines("--since", time.Now().Add(time.Minute).UTC().Format(time.RFC3339)); len(evs) != 0 {
		t.Fatalf("net --since the future: %+v", evs)
	}

	// The policy: show, allow, deny, mode.
	if out, _, code := run("net", sb.ID, "policy"); code != 0 || out != "mode:  allowlist\nallow: api.test 127.0.0.1\ndeny:  -\n" {
		t.Fatalf("net policy: %d %q", code, out)
	}
	if out, errs, code := run("net", sb.ID, "allow", "other.test"); code != 0 || !strings.Contains(out, "allow: api.test 127.0.0.1 other.test\n") {
		t.Fatalf("net allow: %d %q %q", code, out, errs)
	}
	if out := d.sh(t, sb.ID, reach); out != "200 200 " {
		t.Fatalf("after net allow: %q", out)
	}
	if out, errs, code := run("net", sb.ID, "deny", "other.test"); code != 0 || !strings.Contains(out, "allow: api.test 127.0.0.1\ndeny:  other.test\n") {
		t.Fatalf("net deny: %d %q %q", code, out, errs)
	}
	if out := d.sh(t, sb.ID, reach); out != "200 403 " {
		t.Fatalf("after net deny: %q", out)
	}
	if out, _, code := run("net", sb.ID, "mode", "open"); code != 0 || !strings.HasPrefix(out, "mode:  open\n") {
		t.Fatalf("net mode open: %d %q", code, out)
	}
	if out, _, code := run("net", sb.ID, "policy", "--json"); code != 0 || !strings.Contains(out, `"mode": "open"`) {
		t.Fatalf("net policy --json: %d %q", code, out)
	}
	// Bad input: one line on stderr, non-zero, nothing changed.
	for _, args := range [][]string{
		{"net", sb.ID, "mode", "wide"},
		{"net", sb.ID, "allow", "*.com"},
		{"net", sb.ID, "frob"},
		{"net", sb.ID, "allow"},
		{"net", sb.ID, "--since", "yesterday"},
		{"net", sb.ID, "policy", "--denied"},
		{"net", "sb-0000000000000000"},
	} {
		out, errs, code := run(args...)
		if code == 0 || out != "" || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.HasPrefix(errs, "airlock: ") {
			t.Errorf("%v: %d %q %q", args, code, out, errs)
		}
	}
	if np, _ := d.c.NetworkPolicy(ctxT(t), sb.ID); np.Mode != "open" || !slices.Equal(np.Deny, []string{"other.test"}) {
		t.Fatalf("policy changed by refused commands: %+v", np)
	}

	// -f follows until the sandbox is deleted, then exits 0.
	cmd := exec.Command(airlockBin, "net", sb.ID, "-f", "--json", "--dest", "api.test")
	cmd.Env = append(os.Environ(), "AIRLOCK_HOST=unix://"+d.sock)
	stdout, _ := cmd.StdoutPipe()
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines2 := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines2 <- sc.Text()
		}
		close(lines2)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	// What there was (api.test: /x and the two checks above), then a new one.
	seen := 0
	timeout := time.After(20 * time.Second)
	for seen < 3 {
		select {
		case <-lines2:
			seen++
		case <-timeout:
			t.Fatalf("net -f: %d lines of 3; stderr %q", seen, errb.String())
		}
	}
	d.sh(t, sb.ID, curl("http://api.test:"+up.port+"/followed"))
	select {
	case l := <-lines2:
		if !strings.Contains(l, `"/followed"`) {
			t.Fatalf("net -f: %q", l)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("net -f did not print a new request")
	}
	if err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	for range lines2 {
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("net -f after the sandbox was deleted: %v %q", err, errb.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("net -f still running 15s after the sandbox was deleted")
	}
}

// TestExecNetSummary: once the command has ended, airlock exec sums up
// what the sandbox's egress gateway denied (with the airlock net rule that
// would allow it) and what it could not complete: a name not allowed,
// asked twice, and an allowed address where nothing listens. The control:
// the same command with the rule added reaches the server, and only the
// address where nothing listens is reported; a command that only reaches
// allowed servers prints nothing of the kind, nor do earlier commands'
// denials. With -t the summary comes once the session has ended.
func TestExecNetSummary(t *testing.T) {
	d := startDaemon(t, netHosts)
	up := newUpstream(t)
	sb := d.create(t, &api.CreateSandboxRequest{Policy: netPolicy})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().(*net.TCPAddr).Port
	l.Close()
	airlock := func(args ...string) (string, string, int) {
		t.Helper()
		return cli(t, d, args...)
	}
	script := fmt.Sprintf("curl -s -m 10 http://other.test:%[1]s/a; echo; curl -s -m 10 http://other.test:%[1]s/b; echo; curl -s -m 10 -o /dev/null http://api.test:%[2]d/; exit 3", up.port, dead)
	out, errs, code := airlock("exec", sb.ID, "--", "sh", "-c", script)
	other := `"other.test:` + up.port + `"`
	if code != 3 {
		t.Fatalf("exec: exit %d, want the command's 3\n%s%s", code, out, errs)
	}
	for _, want := range []string{
		"airlock: the egress gateway denied 2 and could not complete 1 of the sandbox's connections and requests since the command started (all of them: airlock net " + sb.ID + " --problems):\n",
		"airlock:   " + other + ": denied: not in allowlist (2 times)\n",
		"airlock:     to allow it: airlock net " + sb.ID + " allow " + other + "\n",
		fmt.Sprintf(`airlock:   "api.test:%d": failed: `, dead), "connection refused",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("want %q in the exec's stderr:\n%s", want, errs)
		}
	}
	if strings.Contains(out, "airlock:") {
		t.Errorf("the summary went to stdout:\n%s", out)
	}
	// airlock net --problems lists the same three records; --denied
	// leaves out the failure.
	for flag, want := range map[string]int{"--problems": 3, "--denied": 2} {
		out, errs, code := airlock("net", sb.ID, flag, "--json")
		if n := strings.Count(out, "\n"); code != 0 || n != want {
			t.Errorf("net %s: exit %d, %d lines, want %d\n%s%s", flag, code, n, want, out, errs)
		}
	}

	// Control: the rule it suggests lets the same requests through.
	if _, errs, code := airlock("net", sb.ID, "allow", "other.test:"+up.port); code != 0 {
		t.Fatalf("net allow: exit %d: %s", code, errs)
	}
	out, errs, code = airlock("exec", sb.ID, "--", "sh", "-c", script)
	if code != 3 || !strings.Contains(out, "hello other.test:"+up.port+" /a") || !strings.Contains(out, "hello other.test:"+up.port+" /b") {
		t.Fatalf("control: exit %d\n%s%s", code, out, errs)
	}
	if strings.Contains(errs, "denied") || !strings.Contains(errs, "could not complete 1 of") || !strings.Contains(errs, fmt.Sprintf(`"api.test:%d": failed: `, dead)) {
		t.Errorf("control: want only the dead address reported:\n%s", errs)
	}
	out, errs, code = airlock("exec", sb.ID, "--", "curl", "-s", "-m", "10", "http://api.test:"+up.port+"/ok")
	if code != 0 || out != "hello api.test:"+up.port+" /ok" || errs != "" {
		t.Errorf("an allowed request alone: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// With -t, the same once the terminal session has ended.
	out, errs, code = airlock("exec", "-t", sb.ID, "--", "sh", "-c", fmt.Sprintf("curl -s -m 10 -o /dev/null http://api.test:%d/; echo done; exit 4", dead))
	if code != 4 || !strings.Contains(out, "done") || !strings.Contains(errs, "could not complete 1 of") || !strings.Contains(errs, fmt.Sprintf(`"api.test:%d": failed: `, dead)) {
		t.Errorf("exec -t: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
