package agent

import (
	"io"
	"sync"
	"time"
)

// DefaultOutputCap is how many bytes of each stream of a captured process
// the agent keeps: the most recent ones. A reader that falls further behind
// is told how many bytes it lost, unless it holds the stream (below).
const DefaultOutputCap = 1 << 20

// HoldGrace is how long a reader's hold on a stream lasts without being
// renewed. A reader that is attached holds the stream: the process is made
// to wait rather than have bytes the reader has not read dropped. When its
// supervisor goes away without releasing the hold (a crash, a restart), the
// stream returns to keeping only its tail once HoldGrace has passed, so a
// process is never stalled for good by a reader that is gone, and a client
// that reconnects to the next supervisor within it loses nothing.
const HoldGrace = 10 * time.Second

// outputBuffer keeps the tail of one output stream with absolute offsets,
// so that a reader (a supervisor that reconnected, a client that
// reattached) resumes at its cursor without losing or repeating bytes.
//
// Readers that hold the stream (hold) keep their unread bytes: the pump
// that fills the buffer from the process's pipe stops reading it while
// they fill the buffer (room), so the process blocks in write, instead of
// the oldest bytes being overwritten. Without a live hold the buffer is a
// ring: new bytes overwrite the oldest, and a reader learns how many it
// lost (read's from > its cursor).
type outputBuffer struct {
	mu      sync.Mutex
	ring    []byte // grows up to cap; byte at offset x is ring[x%cap]
	start   uint64 // the oldest byte kept
	end     uint64 // the next byte to be written
	eof     bool
	cap     int
	changed chan struct{} // closed and replaced on every write and at EOF
	ended   chan struct{} // closed at EOF

	holds map[uint64]*hold // attached readers by id
	freed chan struct{}    // closed and replaced when a hold changes or ends
}

// hold is one attached reader's claim on a stream.
type hold struct {
	keep  uint64    // the first byte the reader has not consumed
	until time.Time // when the hold lapses unless renewed
}

func newOutputBuffer(capacity int) *outputBuffer {
	return &outputBuffer{cap: capacity, changed: make(chan struct{}), ended: make(chan struct{}), freed: make(chan struct{})}
}

// write appends p, dropping the oldest bytes beyond the capacity.
func (b *outputBuffer) write(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(p) > 0 {
		if len(b.ring) < b.cap {
			// Still growing: nothing was dropped, offsets are indices.
			n := min(len(p), b.cap-len(b.ring))
			if len(b.ring)+n > cap(b.ring) {
				grown := make([]byte, len(b.ring), min(max(2*cap(b.ring), len(b.ring)+n, 4<<10), b.cap))
				copy(grown, b.ring)
				b.ring = grown
			}
			b.ring = append(b.ring, p[:n]...)
			b.end += uint64(n)
			p = p[n:]
			continue
		}
		n := copy(b.ring[b.end%uint64(b.cap):], p)
		b.end += uint64(n)
		p = p[n:]
	}
	if b.end-b.start > uint64(b.cap) {
		b.start = b.end - uint64(b.cap)
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

// hasEnded reports whether the stream has reached its end (close).
func (b *outputBuffer) hasEnded() bool {
	select {
	case <-b.ended:
		return true
	default:
		return false
	}
}

func (b *outputBuffer) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.eof = true
	close(b.changed)
	b.changed = make(chan struct{})
	close(b.ended)
}

// read returns up to max bytes from cursor on: the data, the offset it
// starts at (past cursor when bytes were dropped: from-cursor of them were
// lost), whether the stream has ended with nothing left after the data, and
// a channel closed at the next change.
func (b *outputBuffer) read(cursor uint64, max int) (data []byte, from uint64, eof bool, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	from = min(b.end, max64(cursor, b.start)) // a cursor from the future reads nothing
	n := int(min(uint64(max), b.end-from))
	data = make([]byte, n)
	if n > 0 {
		i := int(from % uint64(b.cap))
		k := copy(data, b.ring[i:])
		copy(data[k:], b.ring)
	}
	return data, from, b.eof && from+uint64(n) == b.end, b.changed
}

// startHold is the id of the hold a process's output can start with
// (ExecRequest.Hold), which the first attached reader's hold replaces.
// Readers' ids are never 0.
const startHold = 0

// hold registers or renews the hold of reader: the bytes from keep on are
// kept for it until release, or until HoldGrace after now. The first hold
// of a reader ends the start hold.
func (b *outputBuffer) hold(reader, keep uint64, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.holds == nil {
		b.holds = map[uint64]*hold{}
	}
	if reader != startHold {
		delete(b.holds, startHold)
	}
	h := b.holds[reader]
	if h == nil {
		h = &hold{}
		b.holds[reader] = h
	}
	h.keep, h.until = keep, now.Add(HoldGrace)
	b.wakePump()
}

// release ends the hold of reader.
func (b *outputBuffer) release(reader uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.holds[reader]; ok {
		delete(b.holds, reader)
		b.wakePump()
	}
}

// size is the memory the buffer holds.
func (b *outputBuffer) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return cap(b.ring)
}

// releaseAll ends every hold (the output is being dropped).
func (b *outputBuffer) releaseAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holds = nil
	b.wakePump()
}

// extendHolds makes every hold last at least until t.
func (b *outputBuffer) extendHolds(t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range b.holds {
		if h.until.Before(t) {
			h.until = t
		}
	}
}

func (b *outputBuffer) wakePump() {
	close(b.freed)
	b.freed = make(chan struct{})
}

// room returns how many bytes may be written at now without dropping one
// that a live hold keeps (lapsed holds are forgotten); when none, also a
// channel closed when a hold changes and the time the first hold lapses.
func (b *outputBuffer) room(now time.Time) (n int, freed <-chan struct{}, lapse time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	low, held := b.end, false
	for id, h := range b.holds {
		if !now.Before(h.until) {
			delete(b.holds, id)
			continue
		}
		// A hold behind the buffer keeps what is left; one from the
		// future keeps nothing.
		low, held = min(low, max64(h.keep, b.start)), true
		if lapse.IsZero() || h.until.Before(lapse) {
			lapse = h.until
		}
	}
	if !held {
		return b.cap, nil, time.Time{}
	}
	if used := int(b.end - low); used < b.cap {
		return b.cap - used, nil, time.Time{}
	}
	return 0, b.freed, lapse
}

// lateWake is how late a wait for a hold to lapse may wake before the
// agent assumes it was not running meanwhile (its sandbox was paused) and
// gives the renewals queued on its channel a moment to arrive.
const lateWake = time.Second

// pump fills the buffer from r until r ends, waiting while the holds of
// attached readers leave no room: the process writing to r then blocks.
func (b *outputBuffer) pump(r io.Reader) {
	buf := make([]byte, 64<<10)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		n, freed, lapse := b.room(time.Now())
		if n == 0 {
			timer.Reset(time.Until(lapse))
			select {
			case <-freed:
			case <-timer.C:
				if time.Since(lapse) > lateWake {
					b.extendHolds(time.Now().Add(2 * lateWake))
				}
			}
			timer.Stop()
			continue
		}
		k, err := r.Read(buf[:min(n, len(buf))])
		if k > 0 {
			b.write(buf[:k])
		}
		if err != nil {
			b.close()
			return
		}
	}
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
