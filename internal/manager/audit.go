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

// auditLog stores the egress gateways' audit records. The gateways hand
// records over with add, which never blocks: records wait in a bounded
// buffer, and when it is full a record is dropped and counted (metric and
// a rate-limited warning). One goroutine writes what the buffer holds in
// batches, one transaction per batch, prunes each sandbox to its newest
// keep records, and then wakes whoever waits for that sandbox's records.
type auditLog struct {
	st         *store.Store
	log        *slog.Logger
	keep       int         // records kept per sandbox
	pruneEvery int         // records stored for a sandbox between two prunes
	dropped    func(n int) // counts records not stored

	in     chan auditItem
	stopMu sync.RWMutex // held for reading while sending to in, for writing to close it
	closed bool
	done   chan struct{} // closed when the writer has written everything and stopped

	mu  sync.Mutex
	sbs map[string]*auditSandbox

	warnMu   sync.Mutex
	lastWarn time.Time
	unwarned int
}

// auditSandbox is the writer's state of one sandbox.
type auditSandbox struct {
	wake    chan struct{} // closed after records of the sandbox were stored; nil until someone waits
	pending int           // records stored since the last prune
	pruned  bool          // pruned since the daemon started
}

// auditItem is a record, or a barrier to close once everything handed
// over before it is written.
type auditItem struct {
	rec     gateway.Record
	barrier chan struct{}
}

// newAuditLog starts the writer. buffer bounds the records waiting; keep
// bounds the records stored per sandbox (it may exceed keep by up to 1%
// between two prunes).
func newAuditLog(st *store.Store, log *slog.Logger, buffer, keep int, dropped func(n int)) *auditLog {
	a := &auditLog{
		st: st, log: log, keep: keep, pruneEvery: max(1, keep/100), dropped: dropped,
		in: make(chan auditItem, buffer), done: make(chan struct{}), sbs: map[string]*auditSandbox{},
	}
	go a.run()
	return a
}

// add hands a record over without blocking; when the buffer is full (or
// the log closed) the record is dropped and counted.
func (a *auditLog) add(r gateway.Record) {
	a.stopMu.RLock()
	if !a.closed {
		select {
		case a.in <- auditItem{rec: r}:
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
func (a *auditLog) drop(n int) {
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
	a.log.Warn("egress audit records dropped: the buffer was full or the store failed (they are still in this log)", "dropped", n)
}

// wait returns a channel closed once records of sandbox id are stored
// after this call.
func (a *auditLog) wait(id string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sbs[id]
	if s == nil {
		s = &auditSandbox{}
		a.sbs[id] = s
	}
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	return s.wake
}

// forget drops the state of a sandbox that is gone, waking its waiters.
func (a *auditLog) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sbs[id]; s != nil && s.wake != nil {
		close(s.wake)
	}
	delete(a.sbs, id)
}

// sync returns once every record handed over before it is written (or
// dropped because the store failed), or when ctx is done.
func (a *auditLog) sync(ctx context.Context) error {
	b := make(chan struct{})
	a.stopMu.RLock()
	if a.closed {
		a.stopMu.RUnlock()
		return nil
	}
	select {
	case a.in <- auditItem{barrier: b}:
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
func (a *auditLog) close(ctx context.Context) error {
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
func (a *auditLog) run() {
	defer close(a.done)
	batch := make([]gateway.Record, 0, auditBatch)
	var barriers []chan struct{}
	take := func(it auditItem) {
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
func (a *auditLog) write(batch []gateway.Record) {
	events := make([]store.EgressEvent, len(batch))
	counts := map[string]int{}
	for i, r := range batch {
		events[i] = store.EgressEvent{
			SandboxID: r.Sandbox, Time: r.Time.UTC(), Proto: r.Proto, Method: r.Method, Host: r.Host, Port: r.Port,
			Path: r.Path, Addr: r.Addr, Allowed: r.Allowed, Rule: r.Rule, BytesUp: r.BytesUp, BytesDown: r.BytesDown,
			Duration: r.Duration, Error: r.Error, Credential: r.Credential,
		}
		counts[r.Sandbox]++
	}
	keep := map[string]int{}
	a.mu.Lock()
	for id, n := range counts {
		if s := a.sbs[id]; s == nil || !s.pruned || s.pending+n >= a.pruneEvery {
			keep[id] = a.keep
		}
	}
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), auditWriteTimeout)
	stored, err := a.st.AddEgressEvents(ctx, events, keep)
	cancel()
	if err != nil {
		a.log.Error("store egress audit records", "records", len(events), "err", err)
		a.drop(len(events))
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, n := range stored {
		s := a.sbs[id]
		if s == nil {
			s = &auditSandbox{}
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
