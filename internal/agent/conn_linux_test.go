package agent

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// connPair returns both ends of a fresh control channel, closed at the end.
func connPair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	a, b, err := SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	ca, cb := NewConn(a), NewConn(b)
	t.Cleanup(func() { ca.Close(); cb.Close() })
	return ca, cb
}

// A message and its descriptors arrive together and intact; the received
// descriptor refers to the same open file.
func TestConnSendRecvWithFDs(t *testing.T) {
	ca, cb := connPair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	msg := &Message{Type: TypeExec, Exec: &ExecRequest{ID: 7, Argv: []string{"/bin/echo", "a b"}, Env: []string{"K=V"}, Dir: "/workspace"}}
	if err := ca.Send(msg, int(w.Fd())); err != nil {
		t.Fatal(err)
	}
	w.Close()
	got, files, err := cb.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != TypeExec || got.Exec == nil || got.Exec.ID != 7 || strings.Join(got.Exec.Argv, "|") != "/bin/echo|a b" {
		t.Fatalf("got %+v", got)
	}
	if len(files) != 1 {
		t.Fatalf("got %d descriptors, want 1", len(files))
	}
	files[0].WriteString("through the passed fd")
	files[0].Close()
	b2, _ := io.ReadAll(r)
	if string(b2) != "through the passed fd" {
		t.Fatalf("pipe read %q", b2)
	}
}

// A closed peer is ErrClosed, not a hang or a bogus message.
func TestConnPeerClosed(t *testing.T) {
	a, b, err := SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	cb := NewConn(b)
	defer cb.Close()
	a.Close()
	if _, _, err := cb.Recv(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after peer close: %v, want ErrClosed", err)
	}
}

// Garbage from the peer (the agent is untrusted) is an error, and its
// descriptors are not leaked to the caller.
func TestConnRejectsGarbage(t *testing.T) {
	a, b, err := SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cb := NewConn(b)
	defer cb.Close()
	if _, err := a.Write([]byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if m, files, err := cb.Recv(); err == nil || m != nil || files != nil {
		t.Fatalf("garbage accepted: %+v %v %v", m, files, err)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o644)
	env := []string{"PATH=/nonexistent:" + dir}
	if p, err := lookPath("tool", env); err != nil || p != exe {
		t.Errorf("lookPath(tool) = %q, %v", p, err)
	}
	if _, err := lookPath("data", env); execKind(err) != KindNotExecutable {
		t.Errorf("a non-executable file in PATH: %v (kind %q), want %q", err, execKind(err), KindNotExecutable)
	}
	if _, err := lookPath("no-such-tool", env); execKind(err) != KindNoCommand {
		t.Errorf("a name in no PATH directory: %v (kind %q), want %q", err, execKind(err), KindNoCommand)
	}
	if p, _ := lookPath("./rel/x", env); p != "./rel/x" {
		t.Errorf("a path with a slash must be used as is, got %q", p)
	}
	// Without PATH in the process's environment the default applies.
	if p, err := lookPath("sh", nil); err != nil || !strings.HasSuffix(p, "/sh") {
		t.Errorf("lookPath(sh) with the default PATH = %q, %v", p, err)
	}
}

func execKind(err error) string {
	var ee *execError
	if errors.As(err, &ee) {
		return ee.kind
	}
	return "none"
}

// A failed exec is classified like a shell would: missing (127) or there
// but not executable (126), including a script whose interpreter is
// missing; the control is a script that runs.
func TestForkExecKinds(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok", "#!/bin/sh\nexit 0\n", 0o755)
	for _, c := range []struct {
		path, want string
	}{
		{filepath.Join(dir, "missing"), KindNoCommand},
		{filepath.Join(dir, "missing", "deeper"), KindNoCommand},
		{write("data", "x", 0o644), KindNotExecutable},
		{dir, KindNotExecutable},
		{write("badinterp", "#!/no/such/interpreter\n", 0o755), KindNotExecutable},
		{write("garbage", "\x7fELF garbage", 0o755), KindNotExecutable},
	} {
		_, err := syscall.ForkExec(c.path, []string{c.path}, &syscall.ProcAttr{})
		if err == nil {
			t.Fatalf("%s: started", c.path)
		}
		if got := execKind(forkExecError(c.path, c.path, "", err)); got != c.want {
			t.Errorf("%s: %v: kind %q, want %q", c.path, err, got, c.want)
		}
	}
	pid, err := syscall.ForkExec(ok, []string{ok}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	var ws syscall.WaitStatus
	syscall.Wait4(pid, &ws, 0, nil)
	if ws.ExitStatus() != 0 {
		t.Fatalf("control exited %d", ws.ExitStatus())
	}
}

// A message larger than one packet can carry (an exec with a large
// environment) travels spilled, with its own descriptors behind the spill;
// one over MaxMessage is refused with a clear error.
func TestConnLargeMessage(t *testing.T) {
	ca, cb := connPair(t)
	big := strings.Repeat("x", 1<<20)
	env := []string{"A=" + big, "B=" + big}
	r, w, _ := os.Pipe()
	defer r.Close()
	if err := ca.Send(&Message{Type: TypeExec, Exec: &ExecRequest{ID: 3, Argv: []string{"sh"}, Env: env}}, int(w.Fd())); err != nil {
		t.Fatal(err)
	}
	w.Close()
	got, files, err := cb.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got.Spill || got.Exec == nil || got.Exec.ID != 3 || len(got.Exec.Env) != 2 || got.Exec.Env[1] != "B="+big {
		t.Fatalf("large message came back wrong (spill=%v)", got.Spill)
	}
	if len(files) != 1 {
		t.Fatalf("got %d descriptors, want the 1 sent", len(files))
	}
	files[0].Close()

	huge := strings.Repeat("y", MaxMessage)
	if err := ca.Send(&Message{Type: TypeExec, Exec: &ExecRequest{Argv: []string{huge}}}); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("a message over MaxMessage: %v", err)
	}
}

// A data answer with its bytes after the JSON (SendPayload) arrives as the
// same Data, at the largest size, with NUL bytes in the data; a payload
// with any other message, or whose length the header does not give, is
// refused (the agent is untrusted).
func TestConnPayload(t *testing.T) {
	ca, cb := connPair(t)
	data := make([]byte, MaxPayload)
	for i := range data {
		data[i] = byte(i % 251) // with NULs
	}
	if err := ca.SendPayload(&Data{Seq: 9, From: 1 << 40, Data: data, EOF: true}); err != nil {
		t.Fatal(err)
	}
	got, files, err := cb.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 0 || got.Type != TypeData || got.Data == nil || got.Data.Seq != 9 || got.Data.From != 1<<40 || !got.Data.EOF || got.Data.Raw != 0 || !bytes.Equal(got.Data.Data, data) {
		t.Fatalf("got %s with %d bytes", got.Type, len(got.Data.Data))
	}
	if err := ca.SendPayload(&Data{Data: make([]byte, MaxPayload+1)}); err == nil {
		t.Fatal("a payload over MaxPayload was sent")
	}
	for _, pkt := range []string{
		`{"type":"exec","exec":{"id":1}}` + "\x00abc",
		`{"type":"data","data":{"seq":1,"raw":4}}` + "\x00abc",
		`{"type":"data","data":{"seq":1,"raw":3,"data":"eHl6"}}` + "\x00abc",
		`{"type":"data","spill":true,"data":{"seq":1,"raw":3}}` + "\x00abc",
	} {
		a, b, err := SocketPair()
		if err != nil {
			t.Fatal(err)
		}
		cb := NewConn(b)
		if _, err := a.Write([]byte(pkt)); err != nil {
			t.Fatal(err)
		}
		if m, _, err := cb.Recv(); err == nil {
			t.Errorf("packet %q accepted as %+v", pkt, m)
		}
		a.Close()
		cb.Close()
	}
}

// TestCatchSignalsAsInitOutsidePID1: outside a PID namespace's init,
// CatchSignalsAsInit catches the signals a Go program dies of, as
// CatchSignals does (the kernel would not protect it).
func TestCatchSignalsAsInitOutsidePID1(t *testing.T) {
	if os.Getpid() == 1 {
		t.Skip("the test process is PID 1")
	}
	sigs := CatchSignalsAsInit()
	<-sigs.ready
	if sigs.other == nil {
		t.Fatal("not PID 1, and the ending signals are not caught")
	}
	if err := unix.Kill(os.Getpid(), unix.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-sigs.other:
		if got != unix.SIGHUP {
			t.Fatalf("caught %v, want SIGHUP", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SIGHUP to this process was not caught")
	}
}
