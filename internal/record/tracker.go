package record

import "time"

// Tracker matches exec notifications (seccomp) with the proc connector's
// fork, exec and exit events, and emits the record's exec, exit and loss
// events. It holds no locks: the caller serialises calls, and must feed
// every connector event queued before a notification (drain the socket)
// before passing that notification, so that an exec's outcome is decided
// on complete information. Times are CLOCK_MONOTONIC nanoseconds, the
// clock of the connector's timestamps.
type Tracker struct {
	emit func(*Event)
	wall func(mono uint64) time.Time

	members map[int]*member     // processes of the sandbox by host tgid
	pending map[int][]*inflight // execs answered, outcome not yet known, by tgid
	lost    bool                // the connector has dropped events
}

type member struct {
	start uint64 // fork (or first sight) time
	nsPid int
	quiet bool // the sandbox's init: airlock's own, not reported
	// noStart: found running at a takeover (Member), start unknown.
	noStart bool
}

type inflight struct {
	tid int
	at  uint64 // when the notification was answered (before the CONTINUE)
	ev  *Event
}

// Notification is one exec call, read while its caller waited.
type Notification struct {
	At      uint64 // monotonic ns, taken before the call was let go
	Tid     int    // host thread id of the caller
	Tgid    int    // host process id of the caller
	Event   *Event // Type exec, with everything but Result filled in
	NoMatch bool   // the call was not let go (the caller died while it was read)
}

// NewTracker returns a Tracker that passes events to emit; wall turns a
// monotonic time into wall-clock time.
func NewTracker(emit func(*Event), wall func(uint64) time.Time) *Tracker {
	return &Tracker{emit: emit, wall: wall, members: map[int]*member{}, pending: map[int][]*inflight{}}
}

// Seed makes pid (the init, host pid) a member whose own exit is not
// reported; its descendants are the sandbox.
func (t *Tracker) Seed(pid int, at uint64) {
	t.members[pid] = &member{start: at, nsPid: 1, quiet: true}
}

// Member makes pid (host pid; nsPid inside) a member found running when
// a supervisor took the sandbox over: its start is unknown, so its exit
// has no duration.
func (t *Tracker) Member(pid, nsPid int) {
	if _, ok := t.members[pid]; !ok {
		t.members[pid] = &member{nsPid: nsPid, noStart: true}
	}
}

// Fork is the connector's fork event. Threads are not processes.
func (t *Tracker) Fork(at uint64, parentTgid, childPid, childTgid int) {
	if childPid != childTgid {
		return
	}
	if _, ok := t.members[parentTgid]; ok {
		t.members[childTgid] = &member{start: at}
	}
}

// Notify records an exec call that is about to be let go.
func (t *Tracker) Notify(n *Notification) {
	// A call from a thread with an exec still in flight: that one failed
	// (the thread came back and went on).
	for tg, list := range t.pending {
		for i := 0; i < len(list); i++ {
			if list[i].tid == n.Tid {
				t.resolve(list[i], ResultFailed)
				list = append(list[:i], list[i+1:]...)
				i--
			}
		}
		t.setPending(tg, list)
	}
	if n.NoMatch {
		return
	}
	m := t.members[n.Tgid]
	if m == nil {
		m = &member{start: n.At}
		t.members[n.Tgid] = m
	}
	if n.Event.Pid != 0 {
		m.nsPid = n.Event.Pid
	}
	t.pending[n.Tgid] = append(t.pending[n.Tgid], &inflight{tid: n.Tid, at: n.At, ev: n.Event})
}

// Exec is the connector's exec event: the latest call of tgid answered
// before it succeeded; earlier ones failed.
func (t *Tracker) Exec(at uint64, tgid int) {
	list := t.pending[tgid]
	win := -1
	for i, p := range list {
		if p.at <= at {
			win = i
		}
	}
	if win < 0 {
		if m, ok := t.members[tgid]; ok && !m.quiet && !t.lost {
			// (After a loss, this is the outcome of a call already
			// settled as unconfirmed.)
			// An exec the listener never saw: must not happen; say so.
			t.emit(&Event{Type: TypeLoss, Time: t.wall(at), Pid: m.nsPid, HostPid: tgid,
				Reason: "the proc connector reported an exec that no seccomp notification announced"})
		}
		return
	}
	for i := 0; i < win; i++ {
		t.resolve(list[i], ResultFailed)
	}
	t.resolve(list[win], ResultOK)
	t.setPending(tgid, list[win+1:])
}

// Exit is the connector's exit event (code is the kernel's wait status).
func (t *Tracker) Exit(at uint64, pid, tgid int, code uint32) {
	if pid != tgid {
		return
	}
	for _, p := range t.pending[tgid] {
		t.resolve(p, ResultFailed)
	}
	delete(t.pending, tgid)
	m, ok := t.members[tgid]
	if !ok {
		return
	}
	delete(t.members, tgid)
	if m.quiet {
		return
	}
	e := &Event{Type: TypeExit, Time: t.wall(at), Pid: m.nsPid, HostPid: tgid}
	if code&0x7f == 0 {
		c := int(code>>8) & 0xff
		e.Exited, e.Code = true, &c
	} else {
		e.Signal = int(code & 0x7f)
		e.Core = code&0x80 != 0
	}
	if at >= m.start && !m.noStart {
		d := float64(at-m.start) / 1e6
		e.DurationMS = &d
	}
	t.emit(e)
}

// Loss is a connector overflow: events were dropped. Every exec in flight
// is unconfirmed from here on.
func (t *Tracker) Loss(at uint64, reason string) {
	t.lost = true
	t.emit(&Event{Type: TypeLoss, Time: t.wall(at), Reason: reason})
	for tg, list := range t.pending {
		for _, p := range list {
			t.resolve(p, ResultUnconfirmed)
		}
		delete(t.pending, tg)
	}
}

// Flush settles every exec still in flight as unconfirmed, and keeps the
// members: for a supervisor that stops following a sandbox that goes on
// (Recorder.Detach).
func (t *Tracker) Flush() {
	for tg, list := range t.pending {
		for _, p := range list {
			t.resolve(p, ResultUnconfirmed)
		}
		delete(t.pending, tg)
	}
}

// Finish ends the record once every process of the sandbox is gone and
// the connector is drained: execs still in flight are unconfirmed, and
// processes whose exit was never seen get an exit marked lost.
func (t *Tracker) Finish(at uint64) {
	for tg, list := range t.pending {
		for _, p := range list {
			t.resolve(p, ResultUnconfirmed)
		}
		delete(t.pending, tg)
	}
	for pid, m := range t.members {
		if !m.quiet {
			t.emit(&Event{Type: TypeExit, Time: t.wall(at), Pid: m.nsPid, HostPid: pid, Lost: true})
		}
		delete(t.members, pid)
	}
}

func (t *Tracker) resolve(p *inflight, result string) {
	p.ev.Result = result
	t.emit(p.ev)
}

func (t *Tracker) setPending(tgid int, list []*inflight) {
	if len(list) == 0 {
		delete(t.pending, tgid)
	} else {
		t.pending[tgid] = list
	}
}
