package record

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"time"
)

type sink struct{ evs []*Event }

func (s *sink) emit(e *Event) { s.evs = append(s.evs, e) }

func newTestTracker() (*Tracker, *sink) {
	s := &sink{}
	return NewTracker(s.emit, func(m uint64) time.Time { return time.Unix(0, int64(m)) }), s
}

func notif(at uint64, tid, tgid, nsPid int, argv ...string) *Notification {
	return &Notification{At: at, Tid: tid, Tgid: tgid, Event: &Event{Type: TypeExec, Pid: nsPid, HostPid: tgid, Argv: argv}}
}

func (s *sink) results() []string {
	var out []string
	for _, e := range s.evs {
		switch e.Type {
		case TypeExec:
			out = append(out, "exec "+strings.Join(e.Argv, " ")+" "+e.Result)
		case TypeExit:
			switch {
			case e.Lost:
				out = append(out, "exit lost")
			case e.Exited:
				out = append(out, "exit "+itoa(*e.Code))
			default:
				out = append(out, "signal "+itoa(e.Signal))
			}
		case TypeLoss:
			out = append(out, "loss")
		}
	}
	return out
}

// An exec confirmed by the connector, a PATH search whose first tries
// fail (the same thread calls again), and a failed exec followed by the
// process's exit.
func TestTrackerOutcomes(t *testing.T) {
	tr, s := newTestTracker()
	tr.Seed(100, 0)
	tr.Fork(10, 100, 101, 101)
	tr.Notify(notif(20, 101, 101, 2, "sh"))
	tr.Exec(21, 101)
	tr.Fork(30, 101, 102, 102)
	tr.Fork(31, 101, 102, 101) // a thread: not a process
	tr.Notify(notif(40, 102, 102, 3, "/usr/local/bin/x"))
	tr.Notify(notif(41, 102, 102, 3, "/usr/bin/x"))
	tr.Exec(42, 102)
	tr.Exit(50, 102, 102, 0)
	tr.Fork(60, 101, 103, 103)
	tr.Notify(notif(61, 103, 103, 4, "/tmp/noexec"))
	tr.Exit(62, 103, 103, 126<<8)
	tr.Exit(70, 101, 101, 9) // killed by SIGKILL
	tr.Exit(80, 100, 100, 0) // the init: quiet
	tr.Finish(90)
	want := []string{"exec sh ok", "exec /usr/local/bin/x failed", "exec /usr/bin/x ok", "exit 0", "exec /tmp/noexec failed", "exit 126", "signal 9"}
	if got := s.results(); !slices.Equal(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if d := s.evs[3].DurationMS; d == nil || *d != float64(50-30)/1e6 {
		t.Errorf("duration from the fork: %v", d)
	}
	if s.evs[3].Pid != 3 || s.evs[3].HostPid != 102 {
		t.Errorf("exit pids: %+v", s.evs[3])
	}
}

// An exec from a non-leader thread: the connector reports it for the
// thread group; another thread's earlier call is still the latest one
// answered before the event.
func TestTrackerThreadExec(t *testing.T) {
	tr, s := newTestTracker()
	tr.Seed(1, 0)
	tr.Fork(1, 1, 200, 200)
	tr.Notify(notif(10, 205, 200, 5, "/bin/true"))
	tr.Exec(11, 200)
	tr.Exit(12, 205, 200, 0) // a thread's exit is not the process's
	tr.Exit(13, 200, 200, 0)
	if got := s.results(); !slices.Equal(got, []string{"exec /bin/true ok", "exit 0"}) {
		t.Fatalf("got %q", got)
	}
}

// A connector overflow: execs in flight become unconfirmed and a loss is
// written; processes whose exit never came are lost at the end.
func TestTrackerLoss(t *testing.T) {
	tr, s := newTestTracker()
	tr.Seed(1, 0)
	tr.Fork(1, 1, 300, 300)
	tr.Notify(notif(5, 300, 300, 2, "a"))
	tr.Loss(6, "overflow")
	tr.Exec(7, 300) // came after the loss, for a call already settled
	tr.Notify(notif(8, 301, 301, 3, "b"))
	tr.Finish(20)
	got := s.results()
	want := []string{"loss", "exec a unconfirmed", "exec b unconfirmed", "exit lost", "exit lost"}
	if !slices.Equal(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// A notification whose caller died before it was let go is not an exec,
// and it does not settle another call.
func TestTrackerNoMatch(t *testing.T) {
	tr, s := newTestTracker()
	tr.Seed(1, 0)
	tr.Notify(&Notification{Tid: 400, Tgid: 400, NoMatch: true})
	tr.Finish(5)
	if len(s.evs) != 0 {
		t.Fatalf("events: %q", s.results())
	}
}

// Processes outside the sandbox (not descendants of the init) are never
// recorded, whatever the connector reports about them.
func TestTrackerHostProcesses(t *testing.T) {
	tr, s := newTestTracker()
	tr.Seed(1, 0)
	tr.Fork(1, 999, 1000, 1000)
	tr.Exec(2, 1000)
	tr.Exit(3, 1000, 1000, 0)
	tr.Finish(4)
	if len(s.evs) != 0 {
		t.Fatalf("host processes recorded: %q", s.results())
	}
}

func TestDecodeProcEvent(t *testing.T) {
	b := make([]byte, unixHdr+cnMsgLen+40)
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	ev := b[unixHdr+cnMsgLen:]
	binary.NativeEndian.PutUint32(ev[0:], procEventExit)
	binary.NativeEndian.PutUint64(ev[8:], 12345)
	binary.NativeEndian.PutUint32(ev[16:], 7)
	binary.NativeEndian.PutUint32(ev[20:], 7)
	binary.NativeEndian.PutUint32(ev[24:], 2<<8)
	msgs := splitNetlink(append(b, b...))
	if len(msgs) != 2 {
		t.Fatalf("%d messages", len(msgs))
	}
	got, ok := decodeProcEvent(msgs[1][cnMsgLen:])
	if !ok || got.what != procEventExit || got.at != 12345 || got.a != 7 || got.b != 7 || got.c != 2<<8 {
		t.Fatalf("decoded %+v %v", got, ok)
	}
	if _, ok := decodeProcEvent(msgs[1][cnMsgLen : cnMsgLen+10]); ok {
		t.Error("a short event decoded")
	}
	if got := splitNetlink(b[:10]); len(got) != 0 {
		t.Error("a short message split")
	}
}

func TestReadRecord(t *testing.T) {
	evs, err := Read(strings.NewReader(`{"type":"start","time":"2026-01-01T00:00:00Z"}
{"type":"exec","time":"2026-01-01T00:00:00Z","argv":["a","b"]}
`))
	if err != nil || len(evs) != 2 || !slices.Equal(evs[1].Argv, []string{"a", "b"}) {
		t.Fatalf("%v %+v", err, evs)
	}
	if _, err := Read(strings.NewReader("{\"type\":\"start\"}\n{}\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a line without type: %v", err)
	}
	if _, err := Read(strings.NewReader("{\"type\":\"start\"}\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("garbage: %v", err)
	}
}
