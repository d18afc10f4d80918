package agent

import (
	"bytes"
	"os"
	"testing"
	"time"
)

func TestOutputBufferCursors(t *testing.T) {
	b := newOutputBuffer(8)
	b.write([]byte("hello "))
	data, from, eof, _ := b.read(0, 100)
	if string(data) != "hello " || from != 0 || eof {
		t.Fatalf("read(0) = %q from %d eof %v", data, from, eof)
	}
	b.write([]byte("world"))
	// 11 bytes written, 8 kept: bytes 0..2 are gone.
	data, from, _, _ = b.read(0, 100)
	if string(data) != "lo world" || from != 3 {
		t.Fatalf("read(0) after overflow = %q from %d, want \"lo world\" from 3 (3 lost)", data, from)
	}
	// Resuming at a cursor gives exactly the rest, in pieces.
	data, from, _, _ = b.read(6, 2)
	if string(data) != "wo" || from != 6 {
		t.Fatalf("read(6,2) = %q from %d", data, from)
	}
	changed := func() <-chan struct{} { _, _, _, c := b.read(11, 1); return c }()
	b.close()
	select {
	case <-changed:
	default:
		t.Fatal("close did not wake a waiting reader")
	}
	if data, _, eof, _ := b.read(8, 100); string(data) != "rld" || !eof {
		t.Fatalf("read(8) at the end = %q eof %v", data, eof)
	}
	if data, from, eof, _ := b.read(100, 100); len(data) != 0 || from != 11 || !eof {
		t.Fatalf("read past the end = %q from %d eof %v", data, from, eof)
	}
}

func TestOutputBufferBounded(t *testing.T) {
	b := newOutputBuffer(1 << 10)
	chunk := bytes.Repeat([]byte("x"), 100)
	for i := 0; i < 1000; i++ {
		b.write(chunk)
	}
	if len(b.ring) != 1<<10 || b.start != 100000-1<<10 || b.end != 100000 {
		t.Fatalf("kept %d bytes from %d to %d", len(b.ring), b.start, b.end)
	}
}

// TestOutputBufferRing writes through a small ring in uneven pieces: any
// cursor reads exactly the bytes at those offsets, across the wrap.
func TestOutputBufferRing(t *testing.T) {
	const capacity = 1000
	b := newOutputBuffer(capacity)
	var all []byte
	for i := 0; len(all) < 10*capacity; i++ {
		p := make([]byte, (i*37)%613+1)
		for j := range p {
			p[j] = byte(len(all) + j)
		}
		b.write(p)
		all = append(all, p...)
		for _, cursor := range []int{0, len(all) - capacity, len(all) - 1, len(all) - 300, len(all)} {
			if cursor < 0 {
				continue
			}
			data, from, _, _ := b.read(uint64(cursor), 700)
			want := max(cursor, len(all)-capacity)
			if int(from) != want || !bytes.Equal(data, all[want:min(want+700, len(all))]) {
				t.Fatalf("after %d bytes: read(%d) = %d bytes from %d, want from %d", len(all), cursor, len(data), from, want)
			}
		}
	}
}

// TestOutputBufferHolds: a hold keeps what its reader has not consumed
// (room shrinks to nothing instead of bytes being dropped), grows again as
// the reader moves on, and ends with its release or when it lapses; the
// slowest of several readers counts.
func TestOutputBufferHolds(t *testing.T) {
	now := time.Now()
	b := newOutputBuffer(100)
	if n, _, _ := b.room(now); n != 100 {
		t.Fatalf("room without holds = %d", n)
	}
	b.hold(1, 0, now)
	b.write(make([]byte, 60))
	if n, _, _ := b.room(now); n != 40 {
		t.Fatalf("room with 60 held bytes = %d, want 40", n)
	}
	b.write(make([]byte, 40))
	n, freed, lapse := b.room(now)
	if n != 0 || freed == nil || !lapse.Equal(now.Add(HoldGrace)) {
		t.Fatalf("room when full = %d (lapse %v)", n, lapse.Sub(now))
	}
	// A second reader ahead of the first changes nothing; the first
	// moving on frees what both have consumed.
	b.hold(2, 90, now)
	if n, _, _ := b.room(now); n != 0 {
		t.Fatalf("room with the slow reader still at 0 = %d", n)
	}
	b.hold(1, 30, now)
	select {
	case <-freed:
	default:
		t.Fatal("moving a hold did not wake the pump")
	}
	if n, _, _ := b.room(now); n != 30 {
		t.Fatalf("room after reader 1 consumed 30 = %d, want 30", n)
	}
	b.release(1)
	if n, _, _ := b.room(now); n != 90 {
		t.Fatalf("room with reader 2 at 90 = %d, want 90", n)
	}
	// A hold that is not renewed lapses: the buffer is a ring again.
	if n, _, _ := b.room(now.Add(HoldGrace)); n != 100 {
		t.Fatalf("room once the hold lapsed = %d, want 100", n)
	}
	if len(b.holds) != 0 {
		t.Fatalf("lapsed hold kept: %v", b.holds)
	}
	// A hold behind what the buffer still has keeps what is left; one from
	// the future keeps nothing.
	b.write(make([]byte, 50)) // 150 written, 50..150 kept
	b.hold(3, 10, now)
	if n, _, _ := b.room(now); n != 0 {
		t.Fatalf("room with a reader behind the buffer = %d, want 0", n)
	}
	b.hold(3, 1000, now)
	if n, _, _ := b.room(now); n != 100 {
		t.Fatalf("room with a reader from the future = %d, want 100", n)
	}
	b.hold(4, 150, now)
	b.releaseAll()
	if n, _, _ := b.room(now); n != 100 || len(b.holds) != 0 {
		t.Fatalf("room after releaseAll = %d", n)
	}

	// A process's output held from its start keeps everything until the
	// first reader attaches, whose own hold replaces it.
	b = newOutputBuffer(100)
	b.hold(startHold, 0, now)
	b.write(make([]byte, 100))
	if n, _, _ := b.room(now); n != 0 {
		t.Fatalf("room with the start hold and 100 bytes = %d, want 0", n)
	}
	b.hold(5, 40, now)
	if n, _, _ := b.room(now); n != 40 || len(b.holds) != 1 {
		t.Fatalf("room after the first reader attached at 40 = %d (holds %v), want 40", n, b.holds)
	}
}

// TestOutputBufferPump: a writer much faster than its attached reader
// loses nothing (it waits), through a buffer far smaller than the data;
// the control, the same writer without a hold, loses bytes and the reader
// learns how many.
func TestOutputBufferPump(t *testing.T) {
	const total, capacity = 4 << 20, 16 << 10
	data := make([]byte, total)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	run := func(attached bool) (got []byte, lost uint64) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		b := newOutputBuffer(capacity)
		if attached {
			b.hold(1, 0, time.Now())
		}
		go func() { b.pump(r); r.Close() }()
		written := make(chan struct{})
		go func() { w.Write(data); w.Close(); close(written) }()
		if !attached {
			// Without a hold the writer never waits for the reader: it
			// is done before the first read.
			<-written
		}
		var cursor uint64
		for i := 0; ; i++ {
			if i > 1<<20 {
				t.Fatal("no end of stream")
			}
			d, from, eof, changed := b.read(cursor, 3000)
			lost += from - cursor
			got = append(got, d...)
			cursor = from + uint64(len(d))
			if attached {
				b.hold(1, cursor, time.Now())
			}
			if eof {
				return got, lost
			}
			if len(d) == 0 {
				<-changed
			}
		}
	}
	got, lost := run(true)
	if lost != 0 || !bytes.Equal(got, data) {
		t.Fatalf("attached reader: lost %d, got %d bytes (equal %v)", lost, len(got), bytes.Equal(got, data))
	}
	got, lost = run(false)
	if lost == 0 || uint64(len(got))+lost != total {
		t.Fatalf("control without a hold: lost %d, got %d of %d", lost, len(got), total)
	}
}
