package store

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/egress/netsum"
)

func egressEvent(sb string, i int) EgressEvent {
	return EgressEvent{
		SandboxID: sb, Time: at(time.Duration(i) * time.Second), Proto: "connect", Method: "CONNECT",
		Host: fmt.Sprintf("h%d.test", i%3), Port: 443, Path: "", Addr: "192.0.2.1:443", Allowed: i%2 == 0,
		Rule: fmt.Sprintf("rule %d", i), BytesUp: int64(i), BytesDown: int64(2 * i), Duration: time.Duration(i) * time.Millisecond,
		Error: "",
	}
}

// storedEvents opens a store whose sandbox "a" holds batch, stored in one
// transaction (their IDs set).
func storedEvents(t testing.TB, batch []EgressEvent) *Store {
	t.Helper()
	s, _ := openTest(t)
	mustPut(t, s, &Sandbox{ID: "a"})
	if _, err := s.AddEgressEvents(context.Background(), batch, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func listEgress(t *testing.T, s *Store, f EgressFilter) []EgressEvent {
	t.Helper()
	l, err := s.ListEgressEvents(context.Background(), f)
	if err != nil {
		t.Fatalf("ListEgressEvents(%+v): %v", f, err)
	}
	return l
}

func egressIDs(l []EgressEvent) []int64 {
	out := []int64{}
	for _, e := range l {
		out = append(out, e.ID)
	}
	return out
}

// A batch is stored in order with every field; ids increase; events of a
// sandbox that does not exist are skipped, not an error.
func TestEgressRoundTrip(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPut(t, s, &Sandbox{ID: "a"})
	mustPut(t, s, &Sandbox{ID: "b"})
	odd := egressEvent("a", 7)
	odd.Method, odd.Path, odd.Error, odd.Host = "GET", "/x%20y/'; DROP TABLE sandboxes; --", "closed: the new policy denies it", "ünïcødé.test"
	batch := []EgressEvent{egressEvent("a", 0), egressEvent("gone", 1), egressEvent("b", 2), odd}
	stored, err := s.AddEgressEvents(ctx, batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(stored, map[string]int{"a": 2, "b": 1}) {
		t.Fatalf("stored = %v", stored)
	}
	if batch[1].ID != 0 || batch[0].ID <= 0 || batch[2].ID <= batch[0].ID || batch[3].ID <= batch[2].ID {
		t.Fatalf("ids: %v", egressIDs(batch))
	}
	got := listEgress(t, s, EgressFilter{SandboxID: "a"})
	if want := []EgressEvent{batch[0], batch[3]}; !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if _, err := s.ListEgressEvents(ctx, EgressFilter{SandboxID: "gone"}); err == nil {
		t.Fatal("listing the events of a missing sandbox: no error")
	} else {
		wantNotFound(t, "ListEgressEvents(gone)", err)
	}
	if l := listEgress(t, s, EgressFilter{SandboxID: "b"}); len(l) != 1 || l[0].SandboxID != "b" {
		t.Fatalf("other sandbox: %+v", l)
	}
}

// Filters combine; After pages by id with no loss or repeat.
func TestEgressFilters(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPut(t, s, &Sandbox{ID: "a"})
	var batch []EgressEvent
	for i := range 30 {
		batch = append(batch, egressEvent("a", i))
	}
	if _, err := s.AddEgressEvents(ctx, batch, nil); err != nil {
		t.Fatal(err)
	}
	count := func(f EgressFilter, pred func(EgressEvent) bool) {
		t.Helper()
		f.SandboxID = "a"
		var want []int64
		for _, e := range batch {
			if e.ID > f.After && pred(e) {
				want = append(want, e.ID)
			}
		}
		if f.Limit > 0 && len(want) > f.Limit {
			want = want[:f.Limit]
		}
		if got := egressIDs(listEgress(t, s, f)); !reflect.DeepEqual(got, append([]int64{}, want...)) {
			t.Errorf("%+v: got %v, want %v", f, got, want)
		}
	}
	denied := false
	count(EgressFilter{Allowed: &denied}, func(e EgressEvent) bool { return !e.Allowed })
	count(EgressFilter{Host: "h1.test"}, func(e EgressEvent) bool { return e.Host == "h1.test" })
	count(EgressFilter{Host: "H1.test"}, func(e EgressEvent) bool { return false })
	count(EgressFilter{Since: at(20 * time.Second)}, func(e EgressEvent) bool { return !e.Time.Before(at(20 * time.Second)) })
	count(EgressFilter{Allowed: &denied, Host: "h2.test", Since: at(5 * time.Second)}, func(e EgressEvent) bool {
		return !e.Allowed && e.Host == "h2.test" && !e.Time.Before(at(5*time.Second))
	})
	count(EgressFilter{After: batch[9].ID, Limit: 5}, func(EgressEvent) bool { return true })

	var all []int64
	after := int64(0)
	for range 20 {
		page := listEgress(t, s, EgressFilter{SandboxID: "a", After: after, Limit: 7})
		if len(page) == 0 {
			break
		}
		all = append(all, egressIDs(page)...)
		after = page[len(page)-1].ID
	}
	if !reflect.DeepEqual(all, egressIDs(batch)) {
		t.Fatalf("paged: %v, want %v", all, egressIDs(batch))
	}
}

// Pruning keeps exactly the newest events of the sandboxes named, in the
// same transaction as the batch, and leaves other sandboxes alone; ids
// are not reused after the newest rows go.
func TestEgressPrune(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPut(t, s, &Sandbox{ID: "a"})
	mustPut(t, s, &Sandbox{ID: "b"})
	var batch []EgressEvent
	for i := range 50 {
		batch = append(batch, egressEvent("a", i), egressEvent("b", i))
	}
	if _, err := s.AddEgressEvents(ctx, batch, map[string]int{"a": 10}); err != nil {
		t.Fatal(err)
	}
	got := listEgress(t, s, EgressFilter{SandboxID: "a"})
	var wantA []int64
	for _, e := range batch {
		if e.SandboxID == "a" {
			wantA = append(wantA, e.ID)
		}
	}
	if !reflect.DeepEqual(egressIDs(got), wantA[40:]) {
		t.Fatalf("after prune: %v, want the newest 10 %v", egressIDs(got), wantA[40:])
	}
	if n := len(listEgress(t, s, EgressFilter{SandboxID: "b"})); n != 50 {
		t.Fatalf("b: %d events, want 50 (not pruned)", n)
	}
	// Fewer than keep: nothing goes. keep 0: everything.
	if _, err := s.AddEgressEvents(ctx, nil, map[string]int{"a": 100}); err != nil {
		t.Fatal(err)
	}
	if n := len(listEgress(t, s, EgressFilter{SandboxID: "a"})); n != 10 {
		t.Fatalf("a after a loose prune: %d", n)
	}
	last := batch[len(batch)-1].ID
	if _, err := s.AddEgressEvents(ctx, nil, map[string]int{"b": 0}); err != nil {
		t.Fatal(err)
	}
	if n := len(listEgress(t, s, EgressFilter{SandboxID: "b"})); n != 0 {
		t.Fatalf("b after keep 0: %d", n)
	}
	more := []EgressEvent{egressEvent("b", 99)}
	if _, err := s.AddEgressEvents(ctx, more, nil); err != nil {
		t.Fatal(err)
	}
	if more[0].ID <= last {
		t.Fatalf("id %d reused after the newest rows were deleted (last was %d)", more[0].ID, last)
	}
	if _, err := s.AddEgressEvents(ctx, nil, map[string]int{"a": -1}); err == nil {
		t.Fatal("negative keep accepted")
	}
}

// Deleting a sandbox deletes its events and no other's.
func TestEgressCascade(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPut(t, s, &Sandbox{ID: "a"})
	mustPut(t, s, &Sandbox{ID: "keep"})
	if _, err := s.AddEgressEvents(ctx, []EgressEvent{egressEvent("a", 1), egressEvent("keep", 2), egressEvent("a", 3)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM egress_events`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("egress rows after delete: %d (%v), want 1", n, err)
	}
	if l := listEgress(t, s, EgressFilter{SandboxID: "keep"}); len(l) != 1 {
		t.Fatalf("other sandbox's events: %+v", l)
	}
	// A batch for the deleted sandbox (records still buffered when it was
	// deleted) is skipped.
	if st, err := s.AddEgressEvents(ctx, []EgressEvent{egressEvent("a", 4)}, map[string]int{"a": 1}); err != nil || len(st) != 0 {
		t.Fatalf("late batch: %v %v", st, err)
	}
}

// PutSandbox (an upsert) keeps the events; SetSpec changes only the spec.
func TestEgressSurvivesUpsertAndSetSpec(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPut(t, s, &Sandbox{ID: "a", Spec: []byte(`{"x":1}`), Labels: map[string]string{"k": "v"}})
	if _, err := s.AddEgressEvents(ctx, []EgressEvent{egressEvent("a", 1)}, nil); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, &Sandbox{ID: "a", State: "running", Spec: []byte(`{"x":1}`), Labels: map[string]string{"k": "v"}})
	if err := s.SetSpec(ctx, "a", []byte(`{"x":2}`)); err != nil {
		t.Fatal(err)
	}
	sb := mustGet(t, s, "a")
	if string(sb.Spec) != `{"x":2}` || sb.State != "running" || sb.Labels["k"] != "v" {
		t.Fatalf("after SetSpec: %+v", sb)
	}
	if l := listEgress(t, s, EgressFilter{SandboxID: "a"}); len(l) != 1 {
		t.Fatalf("events after upsert: %d", len(l))
	}
	wantNotFound(t, "SetSpec(missing)", s.SetSpec(ctx, "missing", nil))
}

// Pruning 100k rows down to the newest 100k after each batch is the
// writer's steady state; it must stay cheap.
func BenchmarkEgressBatchWithPrune(b *testing.B) {
	path := b.TempDir() + "/airlock.db"
	s, err := Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	s.PutSandbox(ctx, &Sandbox{ID: "a"})
	const keep = 100000
	for i := 0; i < keep; i += 1000 {
		batch := make([]EgressEvent, 1000)
		for j := range batch {
			batch[j] = egressEvent("a", i+j)
		}
		if _, err := s.AddEgressEvents(ctx, batch, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		batch := make([]EgressEvent, 100)
		for j := range batch {
			batch[j] = egressEvent("a", i*100+j)
		}
		if _, err := s.AddEgressEvents(ctx, batch, map[string]int{"a": keep}); err != nil {
			b.Fatal(err)
		}
	}
}

// Problems selects exactly the events netsum.Problem counts, and combines
// with the other filters.
func TestEgressProblems(t *testing.T) {
	var batch []EgressEvent
	for _, allowed := range []bool{true, false} {
		for _, rule := range []string{"", "not in allowlist"} {
			for _, e := range []string{"", "dial tcp: connection refused"} {
				for _, up := range []int64{0, 5} {
					for _, down := range []int64{0, 7} {
						ev := egressEvent("a", len(batch))
						ev.Allowed, ev.Rule, ev.Error, ev.BytesUp, ev.BytesDown = allowed, rule, e, up, down
						batch = append(batch, ev)
					}
				}
			}
		}
	}
	s := storedEvents(t, batch)
	var want []int64
	for _, e := range batch {
		if netsum.Problem(netsum.Record{Host: e.Host, Port: e.Port, Allowed: e.Allowed, Rule: e.Rule, Error: e.Error, BytesUp: e.BytesUp, BytesDown: e.BytesDown}) {
			want = append(want, e.ID)
		}
	}
	if len(want) == 0 || len(want) == len(batch) {
		t.Fatalf("the table selects %d of %d events: it tests nothing", len(want), len(batch))
	}
	if got := egressIDs(listEgress(t, s, EgressFilter{SandboxID: "a", Problems: true})); !reflect.DeepEqual(got, want) {
		t.Fatalf("problems: got %v, want %v", got, want)
	}
	no := false
	for _, e := range listEgress(t, s, EgressFilter{SandboxID: "a", Problems: true, Allowed: &no, Host: "h1.test"}) {
		if e.Allowed || e.Host != "h1.test" || !netsum.Problem(netsum.Record{Allowed: e.Allowed, Rule: e.Rule, Error: e.Error, BytesUp: e.BytesUp, BytesDown: e.BytesDown}) {
			t.Fatalf("combined filters let through %+v", e)
		}
	}
}

// Since selects by start time whatever the order the records were stored
// in (a long connection is stored when it ends, after shorter later ones).
func TestEgressSinceOutOfOrder(t *testing.T) {
	var batch []EgressEvent
	for _, sec := range []int{10, 50, 20, 60, 5, 30} {
		batch = append(batch, egressEvent("a", sec))
	}
	s := storedEvents(t, batch)
	for _, c := range []struct {
		since int
		after int64
		want  []int64
	}{
		{25, 0, []int64{batch[1].ID, batch[3].ID, batch[5].ID}},
		{0, 0, egressIDs(batch)},
		{55, 0, []int64{batch[3].ID}},
		{61, 0, []int64{}},
		{15, batch[2].ID, []int64{batch[3].ID, batch[5].ID}},
	} {
		got := egressIDs(listEgress(t, s, EgressFilter{SandboxID: "a", Since: at(time.Duration(c.since) * time.Second), After: c.after}))
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("since %ds after %d: %v, want %v", c.since, c.after, got, c.want)
		}
	}
}

// BenchmarkEgressSince: the records of the last seconds out of 100,000 a
// sandbox kept (what airlock exec's summary asks after every command).
func BenchmarkEgressSince(b *testing.B) {
	s, _ := openTest(b)
	ctx := context.Background()
	mustPut(b, s, &Sandbox{ID: "a"})
	const n = 100000
	var batch []EgressEvent
	for i := range n {
		batch = append(batch, egressEvent("a", i))
		if len(batch) == 5000 {
			if _, err := s.AddEgressEvents(ctx, batch, nil); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	f := EgressFilter{SandboxID: "a", Problems: true, Since: at((n - 10) * time.Second), Limit: 1001}
	for b.Loop() {
		if _, err := s.ListEgressEvents(ctx, f); err != nil {
			b.Fatal(err)
		}
	}
}
