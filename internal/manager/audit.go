package manager

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/store"
)

// Bounds of the egress audit writer.
const (
	auditBatch        = 512              // records per transaction, at most
	auditWriteTimeout = 30 * time.Second // per transaction
	auditWarnEvery    = 10 * time.Second // at most one warning about drops per period
)

// eventLog stores events that sandboxes make (the egress gateways' audit
// records, the activity records). Producers hand events over with add,
// which never blocks (events wait in a bounded buffer, and when it is
// full one is dropped and counted: metric and a rate-limited warning), or
// with put, which waits for room. One goroutine writes what the buffer
// holds in batches, one transaction per batch (storeFn, which also prunes
// the sandboxes named in its keep map to their newest keep events), and
// then wakes whoever waits for that sandbox's events.
type eventLog[T any] struct {
	what       string // "egress audit records", in messages
	log        *slog.Logger
	keep       int         // events kept per sandbox (0: storeFn bounds them)
	pruneEvery int         // events stored for a sandbox between two prunes
	dropped    func(n int) // counts events not stored
	sandboxOf  func(T) string
	storeFn    func(ctx context.Context, batch []T, keep map[string]int) (map[string]int, error)

	in     chan logItem[T]
	stopMu sync.RWMutex // held for reading while sending to in, for writing to close it
	closed bool
	done   chan struct{} // closed when the writer has written everything and stopped

	mu  sync.Mutex
	sbs map[string]*logSandbox

	warnMu   sync.Mutex
	lastWarn time.Time
	unwarned int
}

// auditLog stores the egress gateways' audit records.
type auditLog = eventLog[gateway.Record]

// logSandbox is the writer's state of one sandbox.
type logSandbox struct {
	wake    chan struct{} // closed after events of the sandbox were stored; nil until someone waits
	pending int           // events stored since the last prune
	pruned  bool          // pruned since the daemon started
}

// logItem is an event, or a barrier to close once everything handed over
// before it is written.
type logItem[T any] struct {
	rec     T
	barrier chan struct{}
}

// newAuditLog starts the egress audit's writer. buffer bounds the records
// waiting; keep bounds the records stored per sandbox (it may exceed keep
// by up to 1% between two prunes).
func newAuditLog(st *store.Store, log *slog.Logger, buffer, keep int, dropped func(n int)) *auditLog {
	a := makeAuditLog(st, log, buffer, keep, dropped)
	go a.run()
	return a
}

// makeAuditLog is newAuditLog without starting the writer.
func makeAuditLog(st *store.Store, log *slog.Logger, buffer, keep int, dropped func(n int)) *auditLog {
	return makeEventLog(log, "egress audit records", buffer, keep, dropped,
		func(r gateway.Record) string { return r.Sandbox },
		func(ctx context.Context, batch []gateway.Record, keep map[string]int) (map[string]int, error) {
			events := make([]store.EgressEvent, len(batch))
			for i, r := range batch {
				events[i] = store.EgressEvent{
					SandboxID: r.Sandbox, Time: r.Time.UTC(), Proto: r.Proto, Method: r.Method, Host: r.Host, Port: r.Port,
					Path: r.Path, Addr: r.Addr, Allowed: r.Allowed, Rule: r.Rule, BytesUp: r.BytesUp, BytesDown: r.BytesDown,
					Duration: r.Duration, Error: r.Error, Credential: r.Credential,
				}
			}
			return st.AddEgressEvents(ctx, events, keep)
		})
}

// makeEventLog makes an event log; its writer is started with run.
func makeEventLog[T any](log *slog.Logger, what string, buffer, keep int, dropped func(n int), sandboxOf func(T) string,
	storeFn func(context.Context, []T, map[string]int) (map[string]int, error)) *eventLog[T] {
	return &eventLog[T]{
		what: what, log: log, keep: keep, pruneEvery: max(1, keep/100), dropped: dropped, sandboxOf: sandboxOf, storeFn: storeFn,
		in: make(chan logItem[T], buffer), done: make(chan struct{}), sbs: map[string]*logSandbox{},
	}
}

// add hands a record over without blocking; when the buffer is full (or
// the log closed) the record is dropped and counted.
func (a *eventLog[T]) add(r T) {
	a.stopMu.RLock()
	if !a.closed {
		select {
		case a.in <- logItem[T]{rec: r}:
			a.stopMu.RUnlock()
			return
		default:
		}
	}
	a.stopMu.RUnlock()
	a.drop(1)
}

// drop counts records that will not be stored and warns, at most once per
// auditWarnEvery.
func (a *eventLog[T]) drop(n int) {
	a.dropped(n)
	a.warnMu.Lock()
	a.unwarned += n
	now := time.Now()
	if now.Sub(a.lastWarn) < auditWarnEvery {
		a.warnMu.Unlock()
		return
	}
	n, a.unwarned, a.lastWarn = a.unwarned, 0, now
	a.warnMu.Unlock()
	a.log.Warn(a.what+" dropped: the buffer was full or the store failed", "dropped", n)
}

// put hands an event over, waiting for room in the buffer (or until the
// log is closed or ctx done: then the event is dropped and counted).
func (a *eventLog[T]) put(ctx context.Context, r T) {
	a.stopMu.RLock()
	if !a.closed {
		select {
		case a.in <- logItem[T]{rec: r}:
			a.stopMu.RUnlock()
			return
		case <-ctx.Done():
		}
	}
	a.stopMu.RUnlock()
	a.drop(1)
}

// wait returns a channel closed once records of sandbox id are stored
// after this call.
func (a *eventLog[T]) wait(id string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sbs[id]
	if s == nil {
		s = &logSandbox{}
		a.sbs[id] = s
	}
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	return s.wake
}

// forget drops the state of a sandbox that is gone, waking its waiters.
func (a *eventLog[T]) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sbs[id]; s != nil && s.wake != nil {
		close(s.wake)
	}
	delete(a.sbs, id)
}

// sync returns once every record handed over before it is written (or
// dropped because the store failed), or when ctx is done.
func (a *eventLog[T]) sync(ctx context.Context) error {
	b := make(chan struct{})
	a.stopMu.RLock()
	if a.closed {
		a.stopMu.RUnlock()
		return nil
	}
	select {
	case a.in <- logItem[T]{barrier: b}:
	case <-ctx.Done():
		a.stopMu.RUnlock()
		return ctx.Err()
	}
	a.stopMu.RUnlock()
	select {
	case <-b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops taking records, writes those in the buffer and stops the
// writer; it returns when that is done or ctx is.
func (a *eventLog[T]) close(ctx context.Context) error {
	a.stopMu.Lock()
	if !a.closed {
		a.closed = true
		close(a.in)
	}
	a.stopMu.Unlock()
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the writer.
func (a *eventLog[T]) run() {
	defer close(a.done)
	batch := make([]T, 0, auditBatch)
	var barriers []chan struct{}
	take := func(it logItem[T]) {
		if it.barrier != nil {
			barriers = append(barriers, it.barrier)
		} else {
			batch = append(batch, it.rec)
		}
	}
	for {
		it, ok := <-a.in
		if !ok {
			return
		}
		take(it)
	more:
		for len(batch) < auditBatch {
			select {
			case it, ok = <-a.in:
				if !ok {
					break more
				}
				take(it)
			default:
				break more
			}
		}
		if len(batch) > 0 {
			a.write(batch)
		}
		for _, b := range barriers {
			close(b)
		}
		batch, barriers = batch[:0], barriers[:0]
		if !ok {
			return
		}
	}
}

// write stores one batch in one transaction, prunes the sandboxes that are
// due, and wakes their waiters.
func (a *eventLog[T]) write(batch []T) {
	counts := map[string]int{}
	for _, r := range batch {
		counts[a.sandboxOf(r)]++
	}
	keep := map[string]int{}
	a.mu.Lock()
	for id, n := range counts {
		if s := a.sbs[id]; a.keep > 0 && (s == nil || !s.pruned || s.pending+n >= a.pruneEvery) {
			keep[id] = a.keep
		}
	}
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), auditWriteTimeout)
	stored, err := a.storeFn(ctx, batch, keep)
	cancel()
	if err != nil {
		a.log.Error("store "+a.what, "records", len(batch), "err", err)
		a.drop(len(batch))
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, n := range stored {
		s := a.sbs[id]
		if s == nil {
			s = &logSandbox{}
			a.sbs[id] = s
		}
		if _, pruned := keep[id]; pruned {
			s.pending, s.pruned = 0, true
		} else {
			s.pending += n
		}
		if s.wake != nil {
			close(s.wake)
			s.wake = nil
		}
	}
}
