package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/store"
)

func auditStore(t *testing.T, ids ...string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, id := range ids {
		if err := st.PutSandbox(context.Background(), &store.Sandbox{ID: id, State: api.StateRunning}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// newTestAudit makes an audit log whose writer is not started yet, and its
// count of dropped records.
func newTestAudit(st *store.Store, buffer, keep int) (*auditLog, *counter) {
	c := &counter{}
	return makeAuditLog(st, slog.New(slog.NewTextHandler(io.Discard, nil)), buffer, keep, c.add), c
}

// counter counts dropped records.
type counter struct{ n atomic.Int64 }

func (c *counter) add(n int) { c.n.Add(int64(n)) }

func rec(sb string, i int) gateway.Record {
	return gateway.Record{Time: time.Unix(1700000000+int64(i), 0), Sandbox: sb, Proto: "http", Method: "GET",
		Host: fmt.Sprintf("h%d.test", i), Port: 80, Path: "/p", Addr: "192.0.2.1:80", Allowed: i%2 == 0, Rule: "r",
		BytesUp: 1, BytesDown: 2, Duration: time.Millisecond}
}

func stored(t *testing.T, st *store.Store, sb string) []store.EgressEvent {
	t.Helper()
	l, err := st.ListEgressEvents(context.Background(), store.EgressFilter{SandboxID: sb})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// add never blocks: with the writer stuck, records past the buffer are
// dropped and counted; the buffered ones are stored once it runs.
func TestAuditDropsWhenFull(t *testing.T) {
	st := auditStore(t, "sb-a")
	a, dropped := newTestAudit(st, 4, 1000)
	done := make(chan struct{})
	go func() {
		for i := range 10 {
			a.add(rec("sb-a", i))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("add blocked on a full buffer")
	}
	if n := dropped.n.Load(); n != 6 {
		t.Fatalf("dropped = %v, want 6", n)
	}
	go a.run()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.sync(ctx); err != nil {
		t.Fatal(err)
	}
	l := stored(t, st, "sb-a")
	if len(l) != 4 || l[0].Host != "h0.test" || l[3].Host != "h3.test" {
		t.Fatalf("stored %d events: %+v", len(l), l)
	}
	if err := a.close(ctx); err != nil {
		t.Fatal(err)
	}
}

// Every field reaches the store; waiters wake after the write; records of
// a sandbox that is gone are skipped; close stores what is buffered, and
// records after close are dropped, not stored.
func TestAuditWritesAndWakes(t *testing.T) {
	st := auditStore(t, "sb-a", "sb-b")
	dropped := &counter{}
	a := newAuditLog(st, slog.New(slog.NewTextHandler(io.Discard, nil)), 256, 1000, dropped.add)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wakeA, wakeB := a.wait("sb-a"), a.wait("sb-b")
	r := rec("sb-a", 0)
	r.Error = "closed: the new policy denies it"
	a.add(r)
	a.add(rec("sb-gone", 1))
	select {
	case <-wakeA:
	case <-ctx.Done():
		t.Fatal("waiter of sb-a not woken")
	}
	if err := a.sync(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wakeB:
		t.Fatal("waiter of sb-b woken by sb-a's record")
	default:
	}
	l := stored(t, st, "sb-a")
	want := store.EgressEvent{ID: l[0].ID, SandboxID: "sb-a", Time: r.Time.UTC(), Proto: "http", Method: "GET", Host: "h0.test",
		Port: 80, Path: "/p", Addr: "192.0.2.1:80", Allowed: true, Rule: "r", BytesUp: 1, BytesDown: 2,
		Duration: time.Millisecond, Error: r.Error}
	if len(l) != 1 || l[0] != want {
		t.Fatalf("stored %+v, want %+v", l, want)
	}
	a.forget("sb-b")
	select {
	case <-wakeB:
	default:
		t.Fatal("forget did not wake sb-b's waiter")
	}
	for i := range 100 {
		a.add(rec("sb-b", i))
	}
	if err := a.close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(stored(t, st, "sb-b")); n != 100 {
		t.Fatalf("close stored %d of 100 buffered records", n)
	}
	a.add(rec("sb-b", 100))
	if n := dropped.n.Load(); n != 1 {
		t.Fatalf("a record after close: dropped = %v, want 1", n)
	}
	if err := a.sync(ctx); err != nil {
		t.Fatalf("sync after close: %v", err)
	}
}

// The writer keeps at most keep records per sandbox (plus fewer than 1%
// between two prunes), the newest.
func TestAuditPrunes(t *testing.T) {
	st := auditStore(t, "sb-a", "sb-b")
	for _, keep := range []int{10, 1000} {
		a := newAuditLog(st, slog.New(slog.NewTextHandler(io.Discard, nil)), 4096, keep, new(counter).add)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		sb := "sb-a"
		if keep == 1000 {
			sb = "sb-b"
		}
		total := 3*keep + 7
		for i := range total {
			a.add(rec(sb, i))
			if i%500 == 0 {
				a.sync(ctx) // several batches
			}
		}
		if err := a.close(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		l := stored(t, st, sb)
		if len(l) < keep || len(l) >= keep+max(1, keep/100) {
			t.Fatalf("keep %d: %d records stored", keep, len(l))
		}
		if last := l[len(l)-1].Host; last != fmt.Sprintf("h%d.test", total-1) {
			t.Fatalf("keep %d: newest record %s", keep, last)
		}
	}
}

// SetNetworkPolicy and NetworkPolicy need no runtime for what they refuse.
func TestNetworkPolicyChecks(t *testing.T) {
	base := policy.Network{Mode: policy.NetworkAllowlist, Allow: []string{"a.test"}}
	n := applyNetwork(base, &api.NetworkPolicy{Mode: "open", Deny: []string{"b.test"}})
	if n.Mode != "open" || n.Allow != nil || len(n.Deny) != 1 {
		t.Fatalf("applyNetwork: %+v", n)
	}
	if v := networkView(policy.Network{}); v.Mode != "none" {
		t.Fatalf("view of the empty network: %+v", v)
	}
	m := &Manager{sandboxes: map[string]*Sandbox{}}
	for _, np := range []api.NetworkPolicy{{}, {Mode: "closed"}} {
		if _, err := m.SetNetworkPolicy(context.Background(), "sb-0000000000000000", np); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%+v: %v, want invalid", np, err)
		}
	}
	if _, err := m.SetNetworkPolicy(context.Background(), "sb-0000000000000000", api.NetworkPolicy{Mode: "none"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing sandbox: %v", err)
	}
	for _, c := range []string{"x", "-1", "1.5"} {
		if _, err := (NetworkQuery{Cursor: c}).filter("sb"); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("cursor %q: %v", c, err)
		}
	}
	f, err := NetworkQuery{Host: "API.Test.", Cursor: "12"}.filter("sb")
	if err != nil || f.Host != "api.test" || f.After != 12 || f.Limit != 100 {
		t.Errorf("filter: %+v %v", f, err)
	}
	for _, l := range []int{-1, 1001} {
		if _, err := (NetworkQuery{Limit: l}).filter("sb"); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("limit %d: %v", l, err)
		}
	}
}
