package store

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var base = time.Date(2025, 3, 4, 5, 6, 7, 891011121, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

func ptr[T any](v T) *T { return &v }

func openTest(t testing.TB) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state", "airlock.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func mustPut(t testing.TB, s *Store, sb *Sandbox) {
	t.Helper()
	if err := s.PutSandbox(context.Background(), sb); err != nil {
		t.Fatalf("PutSandbox(%s): %v", sb.ID, err)
	}
}

func mustGet(t *testing.T, s *Store, id string) *Sandbox {
	t.Helper()
	sb, err := s.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatalf("GetSandbox(%s): %v", id, err)
	}
	return sb
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("%s: got %v, want ErrNotFound", what, err)
	}
}

func ids(list []*Sandbox) []string {
	var out []string
	for _, sb := range list {
		out = append(out, sb.ID)
	}
	return out
}

// oddStrings are label keys and values that would break naive SQL or LIKE.
var oddStrings = []string{"", "a", "'; DROP TABLE sandboxes; --", `"quoted"`, "100%", "_", "%_%", `back\slash`,
	"ünïcødé 日本語 🙂", "new\nline", "nul\x00byte", "\xff\xfe not utf-8", "  spaces  "}

func TestOpenPragmasAndModes(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	mustPut(t, s, &Sandbox{ID: "sb", State: "running"})

	conn, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for pragma, want := range map[string]string{
		"journal_mode": "wal", "synchronous": "1", "foreign_keys": "1", "busy_timeout": "5000",
		"user_version": fmt.Sprint(len(migrations)),
	} {
		var got string
		if err := conn.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}

	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("dir: %v %v, want mode 0700", fi.Mode(), err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", p, fi.Mode().Perm())
		}
	}
}

func TestOpenTightensExistingFileMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestOpenOddPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a dir?x=1#frag%20", "state.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, &Sandbox{ID: "x"})
	s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at the path given: %v", err)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	s, path := openTest(t)
	if _, err := s.db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s2, err := Open(context.Background(), path); err == nil {
		s2.Close()
		t.Fatal("opened a database with a newer schema")
	}
}

func TestSandboxRoundTrip(t *testing.T) {
	s, _ := openTest(t)
	labels := map[string]string{}
	for i, k := range oddStrings {
		labels[k] = oddStrings[len(oddStrings)-1-i]
	}
	full := &Sandbox{
		ID: "sb-full", State: "running", Reason: "because ünïcødé",
		Image: "python:3.12", Policy: "default", Labels: labels,
		Spec: []byte(`{"cpu":2,"env":{"A":"b"}}`), Pool: "pool-key",
		CreatedAt: at(0), LastActivity: at(time.Second),
		ExpiresAt: ptr(at(time.Hour)), Deadline: ptr(at(24 * time.Hour)), EndedAt: ptr(at(2 * time.Hour)),
		IdleTimeout: 90 * time.Second, HostUID: 1879048192, HostGID: 1879113728,
	}
	empty := &Sandbox{ID: "sb-empty"}
	for _, want := range []*Sandbox{full, empty} {
		mustPut(t, s, want)
		if got := mustGet(t, s, want.ID); !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}

	// Times come back in UTC, equal to what was stored; the zero time and
	// nil pointers survive; empty Labels and Spec read back as nil.
	ny, _ := time.LoadLocation("America/New_York")
	if ny == nil {
		ny = time.FixedZone("EST", -5*3600)
	}
	local := &Sandbox{ID: "sb-zone", CreatedAt: at(0).In(ny), ExpiresAt: ptr(time.Time{}), Labels: map[string]string{}, Spec: []byte{}}
	mustPut(t, s, local)
	got := mustGet(t, s, "sb-zone")
	if !got.CreatedAt.Equal(local.CreatedAt) || got.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt = %v, want %v in UTC", got.CreatedAt, local.CreatedAt)
	}
	if got.ExpiresAt == nil || !got.ExpiresAt.IsZero() || got.Deadline != nil || got.LastActivity != (time.Time{}) {
		t.Errorf("zero/nil times: %+v", got)
	}
	if got.Labels != nil || got.Spec != nil {
		t.Errorf("empty Labels/Spec read back as %#v, %#v", got.Labels, got.Spec)
	}

	if err := s.PutSandbox(context.Background(), &Sandbox{ID: "far", CreatedAt: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Error("stored a time outside the int64-nanosecond range")
	}
	if err := s.PutSandbox(context.Background(), &Sandbox{}); err == nil {
		t.Error("stored a sandbox without an ID")
	}
}

func TestPutSandboxUpserts(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPut(t, s, &Sandbox{ID: "sb", State: "creating", Labels: map[string]string{"a": "1", "b": "2"}, CreatedAt: at(0), ExpiresAt: ptr(at(time.Hour))})
	if err := s.PutProcess(ctx, &Process{SandboxID: "sb", ID: 1, StartedAt: at(0)}); err != nil {
		t.Fatal(err)
	}
	want := &Sandbox{ID: "sb", State: "running", Image: "img", Labels: map[string]string{"b": "3", "c": "4"}, CreatedAt: at(0), LastActivity: at(time.Minute)}
	mustPut(t, s, want)
	if got := mustGet(t, s, "sb"); !reflect.DeepEqual(got, want) {
		t.Errorf("after upsert:\n got %+v\nwant %+v", got, want)
	}
	if procs, err := s.ListProcesses(ctx, "sb"); err != nil || len(procs) != 1 {
		t.Errorf("upsert lost the processes: %v, %v", procs, err)
	}
	if list, _, _ := s.ListSandboxes(ctx, Filter{Labels: map[string]string{"a": "1"}}); len(list) != 0 {
		t.Errorf("a removed label still matches: %v", ids(list))
	}
}

// TestPutAssigned: a pool member's record (no labels) rewritten as its
// caller's sandbox, with and without labels, and a record not stored yet;
// the processes are kept, as with PutSandbox.
func TestPutAssigned(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	for _, labels := range []map[string]string{nil, {"team": "a", "'; --": "%_"}} {
		id := fmt.Sprintf("sb%d", len(labels))
		mustPut(t, s, &Sandbox{ID: id, State: "running", Pool: "default", CreatedAt: at(0), LastActivity: at(0)})
		if err := s.PutProcess(ctx, &Process{SandboxID: id, ID: 1, StartedAt: at(0)}); err != nil {
			t.Fatal(err)
		}
		want := &Sandbox{ID: id, State: "running", Policy: "p", Spec: []byte(`{"x":1}`), Labels: labels, Tenant: "t",
			CreatedAt: at(time.Minute), LastActivity: at(time.Minute), ExpiresAt: ptr(at(time.Hour)), Deadline: ptr(at(2 * time.Hour)), IdleTimeout: time.Minute}
		if err := s.PutAssigned(ctx, want); err != nil {
			t.Fatalf("PutAssigned(%s): %v", id, err)
		}
		if got := mustGet(t, s, id); !reflect.DeepEqual(got, want) {
			t.Errorf("after PutAssigned:\n got %+v\nwant %+v", got, want)
		}
		if procs, err := s.ListProcesses(ctx, id); err != nil || len(procs) != 1 {
			t.Errorf("PutAssigned lost the processes: %v, %v", procs, err)
		}
		for k, v := range labels {
			if list, _, err := s.ListSandboxes(ctx, Filter{Labels: map[string]string{k: v}}); err != nil || len(list) != 1 || list[0].ID != id {
				t.Errorf("label %q=%q: got %v, %v", k, v, ids(list), err)
			}
		}
		if list, _, _ := s.ListSandboxes(ctx, Filter{Pool: ptr("default")}); len(list) != 0 {
			t.Errorf("still a pool member: %v", ids(list))
		}
	}
	fresh := &Sandbox{ID: "new", State: "running", CreatedAt: at(0), LastActivity: at(0)}
	if err := s.PutAssigned(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "new"); !reflect.DeepEqual(got, fresh) {
		t.Errorf("a new record:\n got %+v\nwant %+v", got, fresh)
	}
	for _, bad := range []*Sandbox{nil, {State: "running"}} {
		if err := s.PutAssigned(ctx, bad); err == nil {
			t.Errorf("PutAssigned(%+v): no error", bad)
		}
	}
}

func TestSetters(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPut(t, s, &Sandbox{ID: "sb", State: "running", CreatedAt: at(0), LastActivity: at(time.Minute)})
	mustPut(t, s, &Sandbox{ID: "other", State: "running", CreatedAt: at(0), LastActivity: at(time.Minute)})

	if err := s.SetState(ctx, "sb", "stopped", "idle", ptr(at(time.Hour))); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, s, "sb")
	if got.State != "stopped" || got.Reason != "idle" || got.EndedAt == nil || !got.EndedAt.Equal(at(time.Hour)) {
		t.Errorf("after SetState: %+v", got)
	}
	if err := s.SetState(ctx, "sb", "running", "", nil); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "sb"); got.State != "running" || got.Reason != "" || got.EndedAt != nil {
		t.Errorf("after SetState(nil): %+v", got)
	}

	if err := s.SetCreated(ctx, "sb", "running", 1879048192, 1879113728); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "sb"); got.State != "running" || got.HostUID != 1879048192 || got.HostGID != 1879113728 {
		t.Errorf("after SetCreated: %+v", got)
	}
	if got := mustGet(t, s, "other"); got.HostUID != 0 || got.HostGID != 0 {
		t.Errorf("SetCreated reached another sandbox: %+v", got)
	}
	wantNotFound(t, "SetCreated of a missing sandbox", s.SetCreated(ctx, "gone", "running", 1, 1))

	if err := s.SetExpiry(ctx, "sb", ptr(at(2*time.Hour))); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "sb"); got.ExpiresAt == nil || !got.ExpiresAt.Equal(at(2*time.Hour)) {
		t.Errorf("after SetExpiry: %v", got.ExpiresAt)
	}
	if err := s.SetExpiry(ctx, "sb", nil); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "sb"); got.ExpiresAt != nil {
		t.Errorf("after SetExpiry(nil): %v", got.ExpiresAt)
	}

	if err := s.SetPool(ctx, "sb", "warm"); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "sb"); got.Pool != "warm" {
		t.Errorf("after SetPool: %q", got.Pool)
	}
	if err := s.SetPool(ctx, "sb", ""); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "sb"); got.Pool != "" {
		t.Errorf("after SetPool(\"\"): %q", got.Pool)
	}

	// TouchMany: forward moves, backward is ignored, unknown IDs are skipped.
	err := s.TouchMany(ctx, map[string]time.Time{"sb": at(time.Hour), "other": at(time.Second), "gone": at(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "sb"); !got.LastActivity.Equal(at(time.Hour)) {
		t.Errorf("sb last activity %v", got.LastActivity)
	}
	if got := mustGet(t, s, "other"); !got.LastActivity.Equal(at(time.Minute)) {
		t.Errorf("other last activity moved backwards to %v", got.LastActivity)
	}
	if err := s.TouchMany(ctx, nil); err != nil {
		t.Error(err)
	}
}

func TestNotFound(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	_, err := s.GetSandbox(ctx, "nope")
	wantNotFound(t, "GetSandbox", err)
	if err != nil && !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("error lacks the ID: %v", err)
	}
	wantNotFound(t, "SetState", s.SetState(ctx, "nope", "x", "", nil))
	wantNotFound(t, "SetExpiry", s.SetExpiry(ctx, "nope", nil))
	wantNotFound(t, "SetPool", s.SetPool(ctx, "nope", ""))
	wantNotFound(t, "DeleteSandbox", s.DeleteSandbox(ctx, "nope"))
	wantNotFound(t, "PutProcess", s.PutProcess(ctx, &Process{SandboxID: "nope", ID: 1}))
	_, err = s.GetProcess(ctx, "nope", 1)
	wantNotFound(t, "GetProcess", err)
	_, err = s.ListProcesses(ctx, "nope")
	wantNotFound(t, "ListProcesses", err)
	wantNotFound(t, "RevokeKey", s.RevokeKey(ctx, "0123456789ab"))

	mustPut(t, s, &Sandbox{ID: "sb"})
	_, err = s.GetProcess(ctx, "sb", 1)
	wantNotFound(t, "GetProcess (sandbox exists)", err)
	if procs, err := s.ListProcesses(ctx, "sb"); err != nil || len(procs) != 0 {
		t.Errorf("ListProcesses of a sandbox without processes: %v, %v", procs, err)
	}
}

func TestDeleteCascades(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPut(t, s, &Sandbox{ID: "sb", Labels: map[string]string{"k": "v"}})
	mustPut(t, s, &Sandbox{ID: "keep", Labels: map[string]string{"k": "v"}})
	for _, sb := range []string{"sb", "keep"} {
		for i := uint64(1); i <= 3; i++ {
			if err := s.PutProcess(ctx, &Process{SandboxID: sb, ID: i}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.DeleteSandbox(ctx, "sb"); err != nil {
		t.Fatal(err)
	}
	_, err := s.GetProcess(ctx, "sb", 1)
	wantNotFound(t, "GetProcess after delete", err)
	for table, want := range map[string]int{"processes": 3, "labels": 1} {
		var n int
		if err := s.db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil || n != want {
			t.Errorf("%s rows after delete: %d (%v), want %d", table, n, err, want)
		}
	}
	if procs, err := s.ListProcesses(ctx, "keep"); err != nil || len(procs) != 3 {
		t.Errorf("other sandbox's processes: %d, %v", len(procs), err)
	}
}

func TestFilter(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	pools := []string{"", "", "p1", "p2"}
	states := []string{"running", "stopped", "paused"}
	for i, v := range oddStrings {
		mustPut(t, s, &Sandbox{
			ID: fmt.Sprintf("sb%02d", i), State: states[i%len(states)], Pool: pools[i%len(pools)],
			Labels:    map[string]string{v: v, "team": fmt.Sprint(i % 2), "idx": fmt.Sprint(i)},
			CreatedAt: at(time.Duration(i) * time.Second),
		})
	}
	list := func(f Filter) []string {
		t.Helper()
		l, next, err := s.ListSandboxes(ctx, f)
		if err != nil || next != "" {
			t.Fatalf("ListSandboxes(%+v): next %q, err %v", f, next, err)
		}
		return ids(l)
	}
	// Every odd string matches exactly the sandbox that has it as key and value.
	for i, v := range oddStrings {
		got := list(Filter{Labels: map[string]string{v: v}})
		if want := []string{fmt.Sprintf("sb%02d", i)}; !reflect.DeepEqual(got, want) {
			t.Errorf("label %q: got %v, want %v", v, got, want)
		}
	}
	if got := list(Filter{Labels: map[string]string{"%": "%"}}); got != nil {
		t.Errorf("%% matched like a wildcard: %v", got)
	}
	if got := list(Filter{Labels: map[string]string{"team": "0", "idx": "1"}}); got != nil {
		t.Errorf("labels are ANDed: %v", got)
	}

	var want []string
	for i := range oddStrings {
		if i%2 == 0 && states[i%len(states)] != "stopped" && pools[i%len(pools)] == "" {
			want = append(want, fmt.Sprintf("sb%02d", i))
		}
	}
	got := list(Filter{States: []string{"running", "paused"}, Pool: ptr(""), Labels: map[string]string{"team": "0"}})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("state+pool+label: got %v, want %v", got, want)
	}

	count := func(f Filter, pred func(i int) bool) {
		t.Helper()
		want := 0
		for i := range oddStrings {
			if pred(i) {
				want++
			}
		}
		if got := len(list(f)); got != want {
			t.Errorf("%+v: %d, want %d", f, got, want)
		}
	}
	count(Filter{}, func(int) bool { return true })
	count(Filter{Pool: ptr("")}, func(i int) bool { return pools[i%len(pools)] == "" })
	count(Filter{Pool: ptr("p1")}, func(i int) bool { return pools[i%len(pools)] == "p1" })
	count(Filter{Pool: ptr("nope")}, func(int) bool { return false })
	count(Filter{States: []string{"stopped"}}, func(i int) bool { return states[i%len(states)] == "stopped" })
	count(Filter{States: []string{"'; DROP TABLE sandboxes; --"}}, func(int) bool { return false })
	// Listed sandboxes carry their labels.
	l, _, _ := s.ListSandboxes(ctx, Filter{Labels: map[string]string{"idx": "3"}})
	if len(l) != 1 || l[0].Labels[oddStrings[3]] != oddStrings[3] || len(l[0].Labels) != 3 {
		t.Errorf("listed labels: %+v", l)
	}
	if _, _, err := s.ListSandboxes(ctx, Filter{Limit: -1}); err == nil {
		t.Error("negative limit accepted")
	}
}

func TestPagination(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	orig := map[string]string{"orig": "1"}
	var want []string
	for i := range 250 {
		id := fmt.Sprintf("sb-%03d", (i*7)%250) // IDs not in creation order
		// Groups of five share a creation time: the ID breaks the tie.
		mustPut(t, s, &Sandbox{ID: id, State: "running", Labels: orig, CreatedAt: at(time.Duration(i/5) * time.Millisecond)})
		want = append(want, id)
	}
	for g := 0; g < 250; g += 5 {
		sort.Strings(want[g : g+5])
	}
	mustPut(t, s, &Sandbox{ID: "stopped", State: "stopped", CreatedAt: at(time.Millisecond)})

	var got []*Sandbox
	cursor, pages := "", 0
	for {
		list, next, err := s.ListSandboxes(ctx, Filter{Limit: 100, Cursor: cursor, States: []string{"running"}})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(list) > 100 {
			t.Fatalf("page of %d", len(list))
		}
		got = append(got, list...)
		if next == "" {
			break
		}
		// Rows created meanwhile, before and after the cursor, must not
		// disturb the walk.
		for j := range 3 {
			mustPut(t, s, &Sandbox{ID: fmt.Sprintf("new-%d-%d", pages, j), State: "running", CreatedAt: at(time.Duration(j) * 30 * time.Millisecond)})
		}
		cursor = next
	}
	if pages != 3 {
		t.Errorf("%d pages, want 3", pages)
	}
	var gotOrig []string
	for i, sb := range got {
		if i > 0 {
			prev := got[i-1]
			if !prev.CreatedAt.Before(sb.CreatedAt) && !(prev.CreatedAt.Equal(sb.CreatedAt) && prev.ID < sb.ID) {
				t.Errorf("not strictly ordered: %s@%v then %s@%v", prev.ID, prev.CreatedAt, sb.ID, sb.CreatedAt)
			}
		}
		if sb.Labels["orig"] == "1" {
			gotOrig = append(gotOrig, sb.ID)
		}
	}
	if !reflect.DeepEqual(gotOrig, want) {
		t.Errorf("pages do not add up to the list: got %d of %d ids", len(gotOrig), len(want))
	}

	// A page that ends exactly at the end has no next cursor.
	f := Filter{Limit: 250, Labels: orig}
	list, next, err := s.ListSandboxes(ctx, f)
	if err != nil || len(list) != 250 || next != "" {
		t.Errorf("limit = total: %d items, next %q, err %v", len(list), next, err)
	}
	// After the cursor, a new later row appears and a new earlier one does not.
	f.Limit = 249
	_, f.Cursor, _ = s.ListSandboxes(ctx, f)
	mustPut(t, s, &Sandbox{ID: "late", Labels: orig, CreatedAt: at(time.Hour)})
	mustPut(t, s, &Sandbox{ID: "early", Labels: orig, CreatedAt: at(-time.Hour)})
	list, next, err = s.ListSandboxes(ctx, f)
	if err != nil || next != "" || !reflect.DeepEqual(ids(list), []string{want[249], "late"}) {
		t.Errorf("after inserts: %v, %q, %v", ids(list), next, err)
	}
	// Without a limit there is no cursor.
	list, next, err = s.ListSandboxes(ctx, Filter{})
	if err != nil || next != "" || len(list) != 250+1+6+2 {
		t.Errorf("unlimited: %d, %q, %v", len(list), next, err)
	}
}

func TestBadCursor(t *testing.T) {
	s, _ := openTest(t)
	mustPut(t, s, &Sandbox{ID: "a"})
	mustPut(t, s, &Sandbox{ID: "b"})
	_, good, err := s.ListSandboxes(context.Background(), Filter{Limit: 1})
	if err != nil || good == "" {
		t.Fatalf("no cursor: %v", err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	for _, c := range []string{"!!!", "not base64 at all", good + "=", b64([]byte("12345")), b64([]byte("x:a")),
		b64([]byte("12:")), b64([]byte(":a")), b64([]byte("99999999999999999999:a")), "'; DROP TABLE sandboxes; --"} {
		if _, _, err := s.ListSandboxes(context.Background(), Filter{Cursor: c}); !errors.Is(err, ErrBadCursor) {
			t.Errorf("cursor %q: got %v, want ErrBadCursor", c, err)
		}
	}
}

func TestProcesses(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPut(t, s, &Sandbox{ID: "sb"})
	procs := []*Process{
		{SandboxID: "sb", ID: math.MaxUint64, Argv: []string{"sh", "-c", "echo 'hi' \"%s\""}, Cwd: "/work", StartedAt: at(0)},
		{SandboxID: "sb", ID: 2, Argv: []string{"", "\xff\xfe", "日本語", "nul\x00"}, TTY: true, StartedAt: at(time.Second),
			EndedAt: ptr(at(time.Minute)), ExitCode: ptr(0), TimedOut: true},
		{SandboxID: "sb", ID: 1 << 63, StartedAt: at(0), EndedAt: ptr(at(time.Second)), Signal: 9, EndReason: "its terminal was closed"},
		{SandboxID: "sb", ID: 0, Argv: []string{"true"}, ExitCode: ptr(-1)},
		{SandboxID: "sb", ID: 10, Argv: []string{"false"}, ExitCode: ptr(255)},
	}
	for _, p := range procs {
		if err := s.PutProcess(ctx, p); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetProcess(ctx, "sb", p.ID)
		if err != nil || !reflect.DeepEqual(got, p) {
			t.Errorf("round trip:\n got %+v (%v)\nwant %+v", got, err, p)
		}
	}
	list, err := s.ListProcesses(ctx, "sb")
	if err != nil {
		t.Fatal(err)
	}
	var order []uint64
	for _, p := range list {
		order = append(order, p.ID)
	}
	if want := []uint64{0, 2, 10, 1 << 63, math.MaxUint64}; !reflect.DeepEqual(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}

	// Upsert: the process ends.
	up := *procs[0]
	up.EndedAt, up.ExitCode = ptr(at(time.Hour)), ptr(3)
	if err := s.PutProcess(ctx, &up); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetProcess(ctx, "sb", up.ID); !reflect.DeepEqual(got, &up) {
		t.Errorf("after upsert: %+v", got)
	}
	if list, _ := s.ListProcesses(ctx, "sb"); len(list) != len(procs) {
		t.Errorf("upsert added a row: %d", len(list))
	}
	// Empty argv reads back as nil.
	if err := s.PutProcess(ctx, &Process{SandboxID: "sb", ID: 99, Argv: []string{}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetProcess(ctx, "sb", 99); got.Argv != nil {
		t.Errorf("empty argv read back as %#v", got.Argv)
	}
}

func TestArgvCorruption(t *testing.T) {
	for _, b := range [][]byte{nil, {1}, {2, 1, 'a'}, {1, 5, 'a'}, {0, 0}, {0xff}} {
		if _, err := decodeArgv(b); err == nil {
			t.Errorf("decodeArgv(%v) accepted", b)
		}
	}
}

func TestKeys(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	now := base
	s.now = func() time.Time { return now }

	secret, k, err := s.CreateKey(ctx, "ci ünïcødé", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(secret) != keyLen || !strings.HasPrefix(secret, "alk_"+k.ID+"_") || len(k.ID) != 12 || strings.Trim(k.ID, "0123456789abcdef") != "" {
		t.Fatalf("key %q, id %q: wrong shape", secret, k.ID)
	}
	if k.Name != "ci ünïcødé" || !k.CreatedAt.Equal(base) || k.RevokedAt != nil || k.LastUsed != nil {
		t.Errorf("created key: %+v", k)
	}
	secret2, k2, err := s.CreateKey(ctx, "other", "")
	if err != nil || k2.ID == k.ID || secret2 == secret {
		t.Fatalf("second key: %v", err)
	}

	got, err := s.Authenticate(ctx, secret)
	if err != nil || got.ID != k.ID || got.Name != k.Name || got.LastUsed == nil || !got.LastUsed.Equal(now) {
		t.Fatalf("Authenticate: %+v, %v", got, err)
	}
	// LastUsed is written at most once a minute.
	now = base.Add(30 * time.Second)
	if got, _ := s.Authenticate(ctx, secret); !got.LastUsed.Equal(base) {
		t.Errorf("LastUsed after 30s: %v, want %v", got.LastUsed, base)
	}
	now = base.Add(61 * time.Second)
	if got, _ := s.Authenticate(ctx, secret); !got.LastUsed.Equal(now) {
		t.Errorf("LastUsed after 61s: %v, want %v", got.LastUsed, now)
	}

	// Right ID, wrong secret; the other key's secret with this key's ID.
	sec2 := secret2[len(secret2)-keySecretLen:]
	wrong := []string{
		"alk_" + k.ID + "_" + sec2,
		secret[:len(secret)-1] + flip(secret[len(secret)-1]),
		"alk_000000000000_" + secret[17:], // unknown ID
	}
	malformed := []string{
		"", "alk_", secret + "x", secret[:len(secret)-1], strings.ToUpper(secret), "xlk" + secret[3:],
		"alk_" + strings.ToUpper(k.ID) + secret[16:], strings.Replace(secret, "_", "-", 2),
		"alk_" + k.ID + "_" + strings.Repeat("=", keySecretLen), "Bearer " + secret, " " + secret[1:],
		"alk_" + k.ID + "_" + secret[17:len(secret)-1] + "B", // non-canonical last character
	}
	for _, bad := range append(wrong, malformed...) {
		if bad == secret {
			continue
		}
		if _, err := s.Authenticate(ctx, bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("Authenticate(%q): %v, want ErrBadKey", bad, err)
		}
	}

	list, err := s.ListKeys(ctx)
	if err != nil || len(list) != 2 || list[0].ID != k.ID && list[1].ID != k.ID {
		t.Fatalf("ListKeys: %v, %v", list, err)
	}

	now = base.Add(time.Hour)
	if err := s.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, secret); !errors.Is(err, ErrBadKey) {
		t.Errorf("revoked key: %v", err)
	}
	if _, err := s.Authenticate(ctx, secret2); err != nil {
		t.Errorf("other key after revoking one: %v", err)
	}
	now = base.Add(2 * time.Hour)
	if err := s.RevokeKey(ctx, k.ID); err != nil {
		t.Errorf("revoking twice: %v", err)
	}
	list, _ = s.ListKeys(ctx)
	for _, l := range list {
		if l.ID == k.ID && (l.RevokedAt == nil || !l.RevokedAt.Equal(base.Add(time.Hour))) {
			t.Errorf("revoked at %v, want the first revocation", l.RevokedAt)
		}
		if l.ID == k2.ID && l.RevokedAt != nil {
			t.Errorf("other key revoked")
		}
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "Q" // keeps the last character canonical
	}
	return "A"
}

func TestSecretNeverInFile(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	var secrets []string
	for i := range 20 {
		secret, _, err := s.CreateKey(ctx, fmt.Sprint("key", i), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, secret)
	}
	check := func(when string, wantHashes bool) {
		var all []byte
		for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
			b, err := os.ReadFile(p)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		for _, secret := range secrets {
			sec := secret[len(secret)-keySecretLen:]
			raw, _ := base64.RawURLEncoding.DecodeString(sec)
			for _, needle := range [][]byte{[]byte(secret), []byte(sec), raw, []byte(sec[:16])} {
				if bytes.Contains(all, needle) {
					t.Fatalf("%s: secret material %q found in the database files", when, needle)
				}
			}
			if wantHashes && !bytes.Contains(all, hashSecret(sec)) {
				t.Errorf("%s: hash not found: the test is not reading the right files", when)
			}
		}
	}
	check("open", true)
	s.Close()
	check("closed", true)
}

func TestPersistsAcrossReopen(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	want := &Sandbox{ID: "sb", State: "running", Labels: map[string]string{"k": "v"}, Spec: []byte(`{}`), CreatedAt: at(0), ExpiresAt: ptr(at(time.Hour))}
	mustPut(t, s, want)
	proc := &Process{SandboxID: "sb", ID: 7, Argv: []string{"ls"}, StartedAt: at(0)}
	if err := s.PutProcess(ctx, proc); err != nil {
		t.Fatal(err)
	}
	secret, _, err := s.CreateKey(ctx, "k", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := mustGet(t, s, "sb"); !reflect.DeepEqual(got, want) {
		t.Errorf("after reopen: %+v", got)
	}
	if got, err := s.GetProcess(ctx, "sb", 7); err != nil || !reflect.DeepEqual(got, proc) {
		t.Errorf("process after reopen: %+v, %v", got, err)
	}
	if _, err := s.Authenticate(ctx, secret); err != nil {
		t.Errorf("key after reopen: %v", err)
	}
}

// TestSurvivesKill9 writes from a child process, kills it with SIGKILL
// without closing the store, and reads everything back.
func TestSurvivesKill9(t *testing.T) {
	if path := os.Getenv("STORE_TEST_CRASH_CHILD"); path != "" {
		crashChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "airlock.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestSurvivesKill9$")
	cmd.Env = append(os.Environ(), "STORE_TEST_CRASH_CHILD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "secret ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q (%v)", line, err)
	}
	secret := strings.TrimSpace(strings.TrimPrefix(line, "secret "))
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Logf("no WAL file left behind: %v", err)
	}

	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list, _, err := s.ListSandboxes(context.Background(), Filter{})
	if err != nil || len(list) != 50 {
		t.Fatalf("after kill -9: %d sandboxes, %v", len(list), err)
	}
	for i, sb := range list {
		if sb.State != "stopped" || sb.Labels["i"] != fmt.Sprint(i) {
			t.Errorf("after kill -9: %+v", sb)
		}
	}
	if _, err := s.Authenticate(context.Background(), secret); err != nil {
		t.Errorf("key after kill -9: %v", err)
	}
}

func crashChild(path string) {
	ctx := context.Background()
	s, err := Open(ctx, path)
	if err != nil {
		fmt.Println("error", err)
		return
	}
	for i := range 50 {
		id := fmt.Sprintf("sb-%02d", i)
		if err := s.PutSandbox(ctx, &Sandbox{ID: id, State: "running", Labels: map[string]string{"i": fmt.Sprint(i)}, CreatedAt: at(time.Duration(i))}); err != nil {
			fmt.Println("error", err)
			return
		}
		if err := s.SetState(ctx, id, "stopped", "", nil); err != nil {
			fmt.Println("error", err)
			return
		}
	}
	secret, _, err := s.CreateKey(ctx, "k", "")
	if err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("secret", secret)
	time.Sleep(time.Minute) // until killed
}

func TestConcurrentWriters(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	const workers, rounds = 100, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*8)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("sb-%03d", w)
			for r := range rounds {
				sb := &Sandbox{ID: id, State: "running", Labels: map[string]string{"w": fmt.Sprint(w), "r": fmt.Sprint(r)}, CreatedAt: at(time.Duration(w))}
				errs <- s.PutSandbox(ctx, sb)
				errs <- s.PutProcess(ctx, &Process{SandboxID: id, ID: uint64(r), Argv: []string{"x"}, StartedAt: at(0)})
				errs <- s.SetState(ctx, id, "paused", fmt.Sprint(r), nil)
				errs <- s.TouchMany(ctx, map[string]time.Time{id: at(time.Duration(r) * time.Second), "sb-000": at(time.Second)})
				_, _, err := s.ListSandboxes(ctx, Filter{Labels: map[string]string{"w": fmt.Sprint(w)}, Limit: 10})
				errs <- err
				_, err = s.GetSandbox(ctx, id)
				errs <- err
				if r == 0 {
					secret, _, err := s.CreateKey(ctx, id, "")
					errs <- err
					if err == nil {
						_, err = s.Authenticate(ctx, secret)
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	list, _, err := s.ListSandboxes(ctx, Filter{States: []string{"paused"}})
	if err != nil || len(list) != workers {
		t.Errorf("%d paused sandboxes, %v", len(list), err)
	}
	keys, err := s.ListKeys(ctx)
	if err != nil || len(keys) != workers {
		t.Errorf("%d keys, %v", len(keys), err)
	}
	for _, sb := range list {
		procs, err := s.ListProcesses(ctx, sb.ID)
		if err != nil || len(procs) != rounds {
			t.Errorf("%s: %d processes, %v", sb.ID, len(procs), err)
		}
	}
}

// A database from before the host id columns (schema 2) opens, keeps its
// sandboxes (host ids 0: not recorded) and records host ids from then on.
// openFromSchema makes a database at schema version v holding one running
// sandbox, sb-old, then opens it with this binary (which migrates it).
func openFromSchema(t *testing.T, v int) *Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "airlock.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations[:v] {
		if _, err := old.Exec(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, v)); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(`INSERT INTO sandboxes (id, state, reason, image, policy, pool, created_at, last_activity, idle_timeout)
		VALUES ('sb-old', 'running', '', '', '', '', 1, 1, 0)`); err != nil {
		t.Fatal(err)
	}
	old.Close()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestMigrateHostIDs(t *testing.T) {
	s := openFromSchema(t, 2)
	got := mustGet(t, s, "sb-old")
	if got.State != "running" || got.HostUID != 0 || got.HostGID != 0 {
		t.Errorf("migrated record: %+v", got)
	}
	if err := s.SetCreated(context.Background(), "sb-old", "running", 100000, 100000); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "sb-old"); got.HostUID != 100000 || got.HostGID != 100000 {
		t.Errorf("after SetCreated: %+v", got)
	}
}

// TestTenants: keys and sandboxes keep their tenant, the filter selects by
// it, and a database from before tenants (schema 4) opens with every key
// and sandbox the operator's.
func TestTenants(t *testing.T) {
	s := openFromSchema(t, 4)
	ctx := context.Background()
	if got := mustGet(t, s, "sb-old"); got.Tenant != "" {
		t.Fatalf("migrated sandbox has tenant %q", got.Tenant)
	}
	secret, k, err := s.CreateKey(ctx, "a", "acme")
	if err != nil || k.Tenant != "acme" {
		t.Fatalf("create: %+v %v", k, err)
	}
	if got, err := s.Authenticate(ctx, secret); err != nil || got.Tenant != "acme" {
		t.Fatalf("authenticate: %+v %v", got, err)
	}
	if keys, err := s.ListKeys(ctx); err != nil || len(keys) != 1 || keys[0].Tenant != "acme" {
		t.Fatalf("list keys: %+v %v", keys, err)
	}
	now := time.Now()
	mustPut(t, s, &Sandbox{ID: "sb-a", State: "running", Tenant: "acme", CreatedAt: now, LastActivity: now})
	mustPut(t, s, &Sandbox{ID: "sb-g", State: "running", Tenant: "globex", CreatedAt: now, LastActivity: now})
	list := func(f Filter) []string {
		t.Helper()
		l, _, err := s.ListSandboxes(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sb := range l {
			ids = append(ids, sb.ID)
		}
		return ids
	}
	acme, none := "acme", ""
	if got := list(Filter{Tenant: &acme}); len(got) != 1 || got[0] != "sb-a" {
		t.Errorf("acme's: %v", got)
	}
	if got := list(Filter{Tenant: &none}); len(got) != 1 || got[0] != "sb-old" {
		t.Errorf("the operator's own: %v", got)
	}
	if got := list(Filter{}); len(got) != 3 {
		t.Errorf("all: %v", got)
	}
}
