package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestSleepState: what an idle agent carries across a sleep gives the
// resumed agent the same answers for every kept stream (a ring that
// wrapped included) and the same largest process id; an agent that is not
// idle does not sleep, and says why.
func TestSleepState(t *testing.T) {
	defer func(p string) { procRoot = p }(procRoot)
	procRoot = t.TempDir()
	self := filepath.Join(procRoot, strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(self, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(procRoot, "self"), 0o755) // not a process

	buf := func(capacity int, data string, closed bool) *outputBuffer {
		b := newOutputBuffer(capacity)
		b.write([]byte(data))
		if closed {
			b.close()
		}
		return b
	}
	newServer := func() *Server {
		s := NewServer(nil, nil)
		s.Sleep = func(*Conn, *SleepState) error { return nil }
		return s
	}
	s := newServer()
	s.maxID = 7
	s.outputs[3] = [2]*outputBuffer{buf(1<<20, "hello\n", true), buf(1<<20, "", true)}
	s.outputs[5] = [2]*outputBuffer{buf(8, "0123456789abc", true), buf(4, "xy", true)} // stdout wrapped
	s.finished = []uint64{3, 5}
	st, why := s.idleState()
	if why != "" {
		t.Fatalf("an idle agent stays awake: %s", why)
	}
	f, err := st.File() // as it travels
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadSleepState(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := newServer()
	r.Resume(back)
	if r.maxID != 7 || !reflect.DeepEqual(r.finished, s.finished) {
		t.Fatalf("resumed: max id %d, finished %v", r.maxID, r.finished)
	}
	for id, bufs := range s.outputs {
		for i, b := range bufs {
			for _, cursor := range []uint64{0, 5, 6, 9, 13, 20} {
				d1, f1, e1, _ := b.read(cursor, 100)
				d2, f2, e2, _ := r.outputs[id][i].read(cursor, 100)
				if string(d1) != string(d2) || f1 != f2 || e1 != e2 {
					t.Errorf("process %d stream %d from %d: %q %d %v, resumed %q %d %v", id, i, cursor, d1, f1, e1, d2, f2, e2)
				}
			}
		}
	}
	if d, from, _, _ := r.outputs[5][0].read(0, 100); string(d) != "56789abc" || from != 5 {
		t.Fatalf("wrapped stream resumed: %q from %d", d, from)
	}

	// Not idle: each of these keeps it awake.
	for name, mutate := range map[string]func(s *Server){
		"a process runs": func(s *Server) { s.procs[42] = 8 },
		"its output is open": func(s *Server) {
			s.outputs[8] = [2]*outputBuffer{buf(16, "x", false), buf(16, "", true)}
			s.finished = nil
		},
		"a request is running": func(s *Server) { s.busy.Add(1) },
		"an exit is undelivered": func(s *Server) {
			s.pending = append(s.pending, &Exit{ID: 9})
		},
		"another process": func(s *Server) { os.Mkdir(filepath.Join(procRoot, "2"), 0o755) },
		"too much output": func(s *Server) {
			s.outputs[9] = [2]*outputBuffer{buf(2<<20, strings.Repeat("x", sleepCarryMax+1), true), buf(16, "", true)}
			s.finished = []uint64{9}
		},
	} {
		s := newServer()
		mutate(s)
		if st, why := s.idleState(); st != nil || !strings.HasPrefix(why, "busy") {
			t.Errorf("%s: sleeps (%q)", name, why)
		}
		os.Remove(filepath.Join(procRoot, "2"))
	}
	if _, why := NewServer(nil, nil).idleState(); why != "this agent cannot sleep" {
		t.Errorf("without Sleep: %q", why)
	}
}
