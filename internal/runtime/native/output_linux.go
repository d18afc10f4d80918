package native

import (
	"context"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/runtime"
)

var _ runtime.OutputAttacher = (*process)(nil)

// holdRenew is how often an attachment renews its hold while it sends
// nothing else: well within agent.HoldGrace.
const holdRenew = agent.HoldGrace / 5

// AttachOutput implements runtime.OutputAttacher. With an agent that
// predates holds, the attachment reads plainly (the process is never held
// back; a reader that falls behind is told what it lost).
func (p *process) AttachOutput(stream int) runtime.OutputAttachment {
	a := &attachment{p: p, stream: stream}
	if p.sb.agentVersion >= 1 {
		a.reader = randomSeq() | 1 // never 0
		a.stop = make(chan struct{})
		go a.renew()
	}
	return a
}

// attachment is one attached reader of a captured stream.
type attachment struct {
	p      *process
	stream int
	reader uint64        // its id in the agent; 0 without holds
	stop   chan struct{} // closed by Close

	mu     sync.Mutex // orders renewals and the release on the channel
	keep   uint64     // the cursor of the last read
	sent   time.Time  // when the hold was last renewed
	closed bool
	ended  bool // a read reached the end of the stream: nothing more to hold
}

// Read implements runtime.OutputAttachment.
func (a *attachment) Read(ctx context.Context, cursor uint64, max int, wait time.Duration) (runtime.OutputChunk, error) {
	if a.reader != 0 {
		a.mu.Lock()
		a.keep, a.sent = cursor, time.Now()
		a.mu.Unlock()
	}
	ch, err := a.p.readOutput(ctx, a.stream, cursor, max, wait, a.reader)
	if err == nil && ch.EOF && a.reader != 0 {
		a.mu.Lock()
		a.ended = true
		a.mu.Unlock()
	}
	return ch, err
}

// renew keeps the hold alive while the reader is between reads (a slow
// client: the manager is still delivering the last chunk).
func (a *attachment) renew() {
	t := time.NewTicker(holdRenew)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-a.p.sb.done:
			return
		case <-t.C:
		}
		a.mu.Lock()
		if !a.closed && time.Since(a.sent) >= holdRenew {
			a.send(false)
		}
		a.mu.Unlock()
	}
}

// send sends a renewal or the release; a.mu is held.
func (a *attachment) send(release bool) {
	a.sent = time.Now()
	a.p.sb.conn.Send(&agent.Message{Type: agent.TypeHold, Hold: &agent.Hold{
		ID: a.p.id, Stream: a.stream, Reader: a.reader, Keep: a.keep, Release: release,
	}})
}

// Close implements runtime.OutputAttachment.
func (a *attachment) Close(linger bool) {
	if a.reader == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	close(a.stop)
	// A stream read to its end takes no more writes, so the hold holds
	// nothing back (and lapses): no release to send, which spares the
	// agent a message per stream of every exec (in gVisor, several round
	// trips to the Sentry).
	if !linger && !a.ended {
		a.send(true)
	}
}
