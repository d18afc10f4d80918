package agent

import (
	"bytes"
	"strings"
	"testing"
)

// TestFinishedOutputRetention: the agent keeps the output of the newest
// finished captured processes within keepFinishedBytes and
// keepFinishedProcs, dropping the oldest first and never the process that
// just ended; a read of a dropped process's output answers Gone (the
// supervisor makes it a not-found error), a read of a kept one its bytes,
// and a read of a process that never existed a plain error.
func TestFinishedOutputRetention(t *testing.T) {
	defer func(b, p int) { keepFinishedBytes, keepFinishedProcs = b, p }(keepFinishedBytes, keepFinishedProcs)
	a, b, err := SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	peer := NewConn(b)
	s := &Server{conn: NewConn(a), outputs: map[uint64][2]*outputBuffer{}, stdins: map[uint64]chan *Stdin{}}
	const each = 64 << 10
	finish := func(id uint64) {
		out, errs := newOutputBuffer(1<<20), newOutputBuffer(1<<20)
		out.write(bytes.Repeat([]byte{byte('a' + id)}, each))
		out.close()
		errs.close()
		s.mu.Lock()
		s.outputs[id] = [2]*outputBuffer{out, errs}
		s.maxID = max(s.maxID, id)
		s.keepFinished(id)
		s.mu.Unlock()
	}
	kept := func() (ids []uint64) {
		for id := uint64(1); id <= s.maxID; id++ {
			if _, ok := s.outputs[id]; ok {
				ids = append(ids, id)
			}
		}
		return ids
	}

	// Bytes: room for three of them.
	keepFinishedBytes, keepFinishedProcs = 3*each, 100
	for id := uint64(1); id <= 5; id++ {
		finish(id)
	}
	if got := kept(); len(got) != 3 || got[0] != 3 || got[2] != 5 {
		t.Fatalf("kept %v, want the newest three [3 4 5]", got)
	}
	// A single process larger than the room is still kept: it just ended.
	keepFinishedBytes = each / 2
	finish(6)
	if got := kept(); len(got) != 1 || got[0] != 6 {
		t.Fatalf("kept %v, want only the one that just ended [6]", got)
	}
	// Count: at most two.
	keepFinishedBytes, keepFinishedProcs = 1<<30, 2
	finish(7)
	finish(8)
	if got := kept(); len(got) != 2 || got[0] != 7 || got[1] != 8 {
		t.Fatalf("kept %v, want [7 8]", got)
	}

	read := func(id uint64) *Data {
		t.Helper()
		s.read(&ReadRequest{Seq: id, ID: id, Stream: Stdout, Max: 1 << 20})
		m, _, err := peer.Recv()
		if err != nil || m.Data == nil {
			t.Fatalf("read of %d: %v %+v", id, err, m)
		}
		return m.Data
	}
	if d := read(8); d.Gone || d.Error != "" || len(d.Data) != each || d.Data[0] != 'a'+8 {
		t.Fatalf("a kept process's output: gone %v error %q, %d bytes", d.Gone, d.Error, len(d.Data))
	}
	if d := read(2); !d.Gone || !strings.Contains(d.Error, "dropped") {
		t.Fatalf("a dropped process's output: gone %v error %q, want gone", d.Gone, d.Error)
	}
	if d := read(99); d.Gone || d.Error == "" {
		t.Fatalf("a process that never was: gone %v error %q, want a plain error", d.Gone, d.Error)
	}
}
