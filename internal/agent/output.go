package agent

import "sync"

// DefaultOutputCap is how many bytes of each stream of a captured process
// the agent keeps: the most recent ones. A reader that falls further behind
// is told how many bytes it lost.
const DefaultOutputCap = 1 << 20

// outputBuffer keeps the tail of one output stream with absolute offsets,
// so that a reader (a supervisor that reconnected, a client that
// reattached) resumes at its cursor without losing or repeating bytes.
type outputBuffer struct {
	mu      sync.Mutex
	data    []byte // bytes [start, start+len(data))
	start   uint64
	eof     bool
	cap     int
	changed chan struct{} // closed and replaced on every write and at EOF
}

func newOutputBuffer(capacity int) *outputBuffer {
	return &outputBuffer{cap: capacity, changed: make(chan struct{})}
}

func (b *outputBuffer) write(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.data = append(b.data, p...)
	if over := len(b.data) - b.cap; over > 0 {
		// Keep the tail in a fresh slice so the dropped head is freed.
		b.data = append([]byte(nil), b.data[over:]...)
		b.start += uint64(over)
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *outputBuffer) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.eof = true
	close(b.changed)
	b.changed = make(chan struct{})
}

// read returns up to max bytes from cursor on: the data, the offset it
// starts at (past cursor when bytes were dropped: from-cursor of them were
// lost), whether the stream has ended with nothing left after the data, and
// a channel closed at the next change.
func (b *outputBuffer) read(cursor uint64, max int) (data []byte, from uint64, eof bool, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	from = max64(cursor, b.start)
	end := b.start + uint64(len(b.data))
	if from > end {
		from = end // a cursor from the future reads nothing
	}
	n := min(uint64(max), end-from)
	data = append([]byte(nil), b.data[from-b.start:from-b.start+n]...)
	return data, from, b.eof && from+n == end, b.changed
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
