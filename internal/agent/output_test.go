package agent

import (
	"bytes"
	"testing"
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
	if len(b.data) != 1<<10 || b.start != 100000-1<<10 {
		t.Fatalf("kept %d bytes from %d", len(b.data), b.start)
	}
}
