package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// An exec the kernel refuses (a file marked executable that is no
// program) is answered with an error and leaves nothing of its capture
// behind: no output buffers, no stdin writer, no pending Collect. The
// control, a command that starts, has them until it is reaped.
func TestFailedExecLeavesNoCapture(t *testing.T) {
	a, b, err := SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	peer := NewConn(b)
	s := NewServer(NewConn(a), nil)
	bad := filepath.Join(t.TempDir(), "not-a-program")
	if err := os.WriteFile(bad, []byte{0, 1, 2, 3}, 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin"}
	left := func(id uint64) (n int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.outputs[id]; ok {
			n++
		}
		if _, ok := s.stdins[id]; ok {
			n++
		}
		if _, ok := s.collect[id]; ok {
			n++
		}
		return n
	}
	answer := func() *Message {
		t.Helper()
		for i := 0; i < 100; i++ {
			m, files, err := peer.Recv()
			for _, f := range files {
				f.Close()
			}
			if err == nil {
				return m
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("no answer")
		return nil
	}

	s.exec(&ExecRequest{ID: 1, Argv: []string{"sleep", "5"}, Env: env, Dir: "/", Capture: true, Collect: 100}, nil)
	if m := answer(); m.Type != TypeStarted || left(1) != 3 {
		t.Fatalf("control: answer %+v, %d of its capture kept, want 3", m, left(1))
	}
	s.mu.Lock()
	pid := s.pids[1]
	s.mu.Unlock()
	defer func() {
		p, _ := os.FindProcess(pid)
		p.Kill()
		p.Wait()
	}()

	s.exec(&ExecRequest{ID: 2, Argv: []string{bad}, Env: env, Dir: "/", Capture: true, Collect: 100}, nil)
	if m := answer(); m.Type != TypeError || m.Error == nil || m.Error.ID != 2 {
		t.Fatalf("refused exec answered %+v", m)
	}
	if n := left(2); n != 0 {
		t.Fatalf("a refused exec left %d parts of its capture", n)
	}
}
