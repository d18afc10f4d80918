package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/record"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/store"
)

// The activity record of sandboxes made with record: true. The native
// runtime's exec listener and the proc connector feed a record.Recorder
// per sandbox, whose lines go to the store through an eventLog (put: a
// full buffer slows the sandbox's execs down rather than losing them).

// RecordQuery selects events of a sandbox's activity record.
type RecordQuery struct {
	Types  []string  // only these types; empty: all
	Since  time.Time // only events at or after it
	Cursor string    // list the events after the one with this cursor; "" from the oldest
	Limit  int       // page size: 0 is 100; at most 1000 (ignored by FollowEvents)
}

// recordTypes are the event types the daemon's record has.
var recordTypes = []string{api.RecordStart, api.RecordExec, api.RecordExit, api.RecordNet, api.RecordUsage, api.RecordLoss, api.RecordEnd}

type recordLog = eventLog[store.RecordEvent]

// newRecordLog starts the record's writer: buffer bounds the events
// waiting, keep the events stored per sandbox (the last kept is a loss
// event saying the record is full).
func newRecordLog(st *store.Store, m *Manager, buffer, keep int) *recordLog {
	full := func(sandbox string, at time.Time) store.RecordEvent {
		b, _ := json.Marshal(&record.Event{Type: record.TypeLoss, Time: at.UTC(),
			Reason: fmt.Sprintf("the record is full (%d events): later events of this sandbox are not stored", keep)})
		return store.RecordEvent{Time: at, Type: record.TypeLoss, Data: b}
	}
	l := makeEventLog(m.log, "activity record events", buffer, 0, func(n int) { m.met.recordDropped.Add(float64(n)) },
		func(e store.RecordEvent) string { return e.SandboxID },
		func(ctx context.Context, batch []store.RecordEvent, _ map[string]int) (map[string]int, error) {
			return st.AddRecordEvents(ctx, batch, keep, full)
		})
	go l.run()
	return l
}

// recordSink is where a sandbox's Recorder writes: one JSON line per
// Write, handed to the record's writer.
type recordSink struct {
	m  *Manager
	id string
}

func (s recordSink) Write(p []byte) (int, error) {
	var h struct {
		Type string    `json:"type"`
		Time time.Time `json:"time"`
	}
	if err := json.Unmarshal(p, &h); err != nil {
		return 0, err
	}
	s.m.records.put(context.Background(), store.RecordEvent{SandboxID: s.id, Time: h.Time, Type: h.Type, Data: bytes.Clone(bytes.TrimSpace(p))})
	return len(p), nil
}

// putRecord writes an event of the daemon's own (end, loss) to a
// sandbox's record.
func (m *Manager) putRecord(id string, e *record.Event) {
	recordSink{m, id}.Write(mustJSON(e))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// checkRecord refuses record: true where it cannot be kept.
func (m *Manager) checkRecord(rtName string) error {
	switch {
	case os.Geteuid() != 0:
		return fmt.Errorf("record: the activity record needs a daemon running as root (the proc connector that reports exec outcomes and exits needs CAP_NET_ADMIN on the host): %w", errdefs.ErrNotSupported)
	case rtName != policy.RuntimeNative && rtName != "":
		// A policy feature this backend cannot enforce: refused (400),
		// never dropped.
		return invalid("record: the activity record is not supported by the %s runtime (execs happen in its own kernel, out of the host's seccomp and proc connector); use runtime native", rtName)
	case m.cfg.Insecure.NoCgroups:
		return fmt.Errorf("record: the activity record samples resource use from the sandbox's cgroup, and this daemon runs without cgroups: %w", errdefs.ErrNotSupported)
	}
	return nil
}

// recordSandbox is what the record needs of a runtime sandbox: the native
// runtime's exec listener and init pid.
type recordSandbox interface {
	ExecListener() *os.File
	InitPid() int
}

// recordUsageEvery is how often the record samples the sandbox's cgroup.
const recordUsageEvery = 5 * time.Second

// startRecord follows a sandbox the runtime just made (resume false) or
// re-adopted (resume true) with rc: it takes the exec listener, which
// every exec in the sandbox waits on from then on.
func (m *Manager) startRecord(sb *Sandbox, rt runtime.Sandbox, rc *record.Recorder, resume bool) error {
	rs, ok := rt.(recordSandbox)
	var l *os.File
	if ok {
		l = rs.ExecListener()
	}
	if l == nil {
		return fmt.Errorf("record: the %s runtime handed over no exec listener", rt.Info().Runtime)
	}
	now := time.Now().UTC()
	if resume {
		rc.Write(&record.Event{Type: record.TypeLoss, Time: now, Reason: "the daemon restarted: exits and exec outcomes while no daemon ran are not in the record, " +
			"nor events of its last moments before it stopped; execs in the sandbox waited for the new daemon"})
		rc.Resume(l, rs.InitPid(), rt.Info().CgroupPaths, recordUsageEvery)
	} else {
		rc.Write(&record.Event{Type: record.TypeStart, Time: now, Version: record.SchemaVersion, Sandbox: sb.id})
		rc.Start(l, rs.InitPid(), rt.Info().CgroupPaths, recordUsageEvery)
	}
	sb.mu.Lock()
	sb.recorder = rc
	sb.mu.Unlock()
	return nil
}

// resumeRecord takes an adopted sandbox's record over.
func (m *Manager) resumeRecord(sb *Sandbox, rt runtime.Sandbox) error {
	rc, err := record.Open(recordSink{m, sb.id})
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if err := m.startRecord(sb, rt, rc, true); err != nil {
		rc.Stop()
		return err
	}
	return nil
}

// endRecord ends a sandbox's record once its processes are gone: the
// recorder settles what is open, then the end event, and everything is
// stored (within 5 s) before it returns.
func (m *Manager) endRecord(ctx context.Context, sb *Sandbox, reason string) {
	sb.mu.Lock()
	rc := sb.recorder
	sb.recorder = nil
	has := sb.spec.Record
	sb.mu.Unlock()
	if !has {
		return
	}
	if rc != nil {
		rc.Stop()
	}
	m.putRecord(sb.id, &record.Event{Type: record.TypeEnd, Time: time.Now().UTC(), Sandbox: sb.id, Reason: reason})
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	if err := m.records.sync(sctx); err != nil {
		m.log.Warn("activity record: events of a sandbox that ended not stored yet", "sandbox", sb.id, "err", err)
	}
	cancel()
}

// recordNet copies an egress audit record into the sandbox's activity
// record, if it has one.
func (m *Manager) recordNet(r gateway.Record) {
	m.mu.Lock()
	sb := m.sandboxes[r.Sandbox]
	m.mu.Unlock()
	if sb == nil {
		return
	}
	sb.mu.Lock()
	rc := sb.recorder
	sb.mu.Unlock()
	if rc == nil {
		return
	}
	allowed := r.Allowed
	d := float64(r.Duration.Microseconds()) / 1000
	rc.Write(&record.Event{Type: record.TypeNet, Time: r.Time.UTC(), Proto: r.Proto, Method: r.Method, Host: r.Host, Port: r.Port,
		Addr: r.Addr, URLPath: r.Path, Allowed: &allowed, Rule: r.Rule, Error: r.Error, BytesUp: r.BytesUp, BytesDown: r.BytesDown, DurationMS: &d})
}

// filter checks q and turns it into the store's filter.
func (q RecordQuery) filter(id string) (store.RecordFilter, error) {
	f := store.RecordFilter{SandboxID: id, Since: q.Since, Limit: q.Limit}
	for _, t := range q.Types {
		if !slices.Contains(recordTypes, t) {
			return f, invalid("type %s: not an event type (want %s)", errdefs.Quote(t), strings.Join(recordTypes, ", "))
		}
		if !slices.Contains(f.Types, t) {
			f.Types = append(f.Types, t)
		}
	}
	if q.Cursor != "" {
		n, err := strconv.ParseInt(q.Cursor, 10, 64)
		if err != nil || n < 0 {
			return f, invalid("cursor %s: not a cursor of this API (want the cursor of a record event)", errdefs.Quote(q.Cursor))
		}
		f.After = n
	}
	switch {
	case f.Limit == 0:
		f.Limit = defaultNetworkLimit
	case f.Limit < 0 || f.Limit > maxNetworkLimit:
		return f, invalid("limit %d: want 1 to %d", q.Limit, maxNetworkLimit)
	}
	return f, nil
}

// recordEvent is the API's form of a stored event.
func recordEvent(e store.RecordEvent) (api.RecordEvent, error) {
	var r record.Event
	if err := json.Unmarshal(e.Data, &r); err != nil {
		return api.RecordEvent{}, fmt.Errorf("record event %d: %w", e.ID, err)
	}
	return api.RecordEvent{
		Cursor: netCursor(e.ID), Type: r.Type, Time: r.Time, Sandbox: r.Sandbox, Version: r.Version,
		Pid: r.Pid, HostPid: r.HostPid, PPid: r.PPid, HostPPid: r.HostPPid,
		Syscall: r.Syscall, Path: r.Path, PathTarget: r.PathTarget, Argv: r.Argv, ArgvTruncated: r.ArgvTruncated, Cwd: r.Cwd, Result: r.Result,
		Exited: r.Exited, Code: r.Code, Signal: r.Signal, Core: r.Core, DurationMs: r.DurationMS, Lost: r.Lost,
		Proto: r.Proto, Method: r.Method, Host: r.Host, Port: r.Port, Addr: r.Addr, URLPath: r.URLPath, Allowed: r.Allowed, Rule: r.Rule,
		BytesUp: r.BytesUp, BytesDown: r.BytesDown, Error: r.Error,
		CPUNs: r.CPUNs, MemoryBytes: r.MemoryBytes, MemoryPeakBytes: r.MemoryPeak, Pids: r.Pids, Reason: r.Reason,
	}, nil
}

// recorded looks a sandbox up for its record: one made without is a
// conflict.
func (m *Manager) recorded(ctx context.Context, id string) (*Sandbox, error) {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	has := sb.spec.Record
	sb.mu.Unlock()
	if !has {
		return nil, conflict("sandbox %s was made without an activity record (create it with record: true, or `airlock create --record`)", id)
	}
	return sb, nil
}

// Events returns one page of a sandbox's activity record, oldest first.
func (m *Manager) Events(ctx context.Context, id string, q RecordQuery) (api.RecordEventsPage, error) {
	sb, err := m.recorded(ctx, id)
	if err != nil {
		return api.RecordEventsPage{}, err
	}
	f, err := q.filter(id)
	if err != nil {
		return api.RecordEventsPage{}, err
	}
	sb.touch(time.Now().UTC())
	limit := f.Limit
	f.Limit++ // one more, to learn whether there is a next page
	evs, err := m.st.ListRecordEvents(ctx, f)
	if err != nil {
		return api.RecordEventsPage{}, err
	}
	page := api.RecordEventsPage{Events: make([]api.RecordEvent, 0, min(len(evs), limit))}
	if len(evs) > limit {
		evs = evs[:limit]
		page.NextCursor = netCursor(evs[limit-1].ID)
	}
	for _, e := range evs {
		ev, err := recordEvent(e)
		if err != nil {
			return api.RecordEventsPage{}, err
		}
		page.Events = append(page.Events, ev)
	}
	return page, nil
}

// FollowEvents sends a sandbox's record events that match q, from its
// cursor on, to emit: those stored, then each new one as it is stored,
// until the sandbox ends (it then returns nil once the end event was
// sent) or ctx is done; like FollowNetwork.
func (m *Manager) FollowEvents(ctx context.Context, id string, q RecordQuery, start func(), emit func(api.RecordEvent) error) error {
	sb, err := m.recorded(ctx, id)
	if err != nil {
		return err
	}
	q.Limit = 0
	f, err := q.filter(id)
	if err != nil {
		return err
	}
	f.Limit = maxNetworkLimit
	sb.touch(time.Now().UTC())
	start()
	return m.followStored(ctx, sb, func() <-chan struct{} { return m.records.wait(id) }, func() (bool, error) {
		evs, err := m.st.ListRecordEvents(ctx, f)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return false, err
			}
			return false, fmt.Errorf("sandbox %s: record events: %w", id, err)
		}
		for _, e := range evs {
			ev, err := recordEvent(e)
			if err != nil {
				return false, err
			}
			if err := emit(ev); err != nil {
				return false, err
			}
			f.After = e.ID
		}
		return len(evs) == f.Limit, nil
	})
}
