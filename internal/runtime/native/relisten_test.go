//go:build linux

package native_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// squatter runs inside a sandbox: it binds 127.0.0.1:3128 (SO_REUSEADDR,
// as a squatter would) as soon as nothing else listens there, then stays.
const squatter = `
import socket, time
while True:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", 3128)); s.listen(); break
    except OSError:
        s.close(); time.sleep(0.02)
time.sleep(1000)
`

// TestAdoptRemakesListeners: the Spec.Listen sockets of a detached sandbox
// die with its supervisor; Adopt makes them again inside the sandbox's
// network namespace (not the host's), and a process inside reaches the new
// supervisor through them. Denial: when a process inside took the address
// while no supervisor held it, adoption fails and names the address.
func TestAdoptRemakesListeners(t *testing.T) {
	needRoot(t)
	rt := privateRuntime(t)
	rt.Detached = true
	id := runDetachedChildMode(t, rt.StateRoot, true, "listen")
	t.Cleanup(func() { rt.Remove(context.Background(), id) })
	pid := initPid(t, rt.StateRoot, id)
	if l := tcpListeners(t, pid, 3128); len(l) != 0 {
		t.Fatalf("something still listens on 3128 inside the sandbox after its supervisor died: %v", l)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, _, err := rt.Adopt(ctx, id)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	ls := sb.(runtime.Listeners).Listeners()
	if len(ls) != 2 || ls[0].Addr().String() != "127.0.0.1:3128" || ls[1].Addr().String() != "[::1]:1080" {
		t.Fatalf("listeners after adoption: %v", ls)
	}
	// Host-side oracle: the new socket is in the sandbox's namespace's
	// table, and not in this process's.
	ino := socketInode(t, ls[0])
	if !tcpListeners(t, pid, 3128)[ino] {
		t.Fatalf("listener (socket inode %s) not in the sandbox's network namespace", ino)
	}
	if tcpListeners(t, os.Getpid(), 3128)[ino] {
		t.Fatal("listener is in the supervisor's network namespace")
	}
	accepted := make(chan string, 4)
	for _, l := range ls {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				b := make([]byte, 4)
				io.ReadFull(c, b)
				accepted <- l.Addr().String()
				c.Write([]byte("pong:" + string(b)))
				c.Close()
			}
		}()
	}
	script := `
import socket
for host, port in (("127.0.0.1", 3128), ("::1", 1080)):
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(b"ping"); print(s.recv(16).decode())
try:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 3128)); s.listen(); print("took over")
except OSError as e:
    print("bind", e.errno)
`
	out, st := run(t, sb, "python3", "-c", script)
	if want := "pong:ping\npong:ping\nbind 98\n"; st.Code != 0 || out != want {
		t.Fatalf("through the re-made listeners: %q (%+v), want %q", out, st, want)
	}
	for _, want := range []string{"127.0.0.1:3128", "[::1]:1080"} {
		select {
		case got := <-accepted:
			if got != want {
				t.Fatalf("accepted on %s, want %s", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no connection accepted on %s", want)
		}
	}
	// The state Adopt rewrote still lists the addresses, for the next
	// restart.
	initPid(t, rt.StateRoot, id)
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Denial: a process inside binds 127.0.0.1:3128 once the supervisor
	// is gone.
	id = runDetachedChildMode(t, rt.StateRoot, true, "squat")
	t.Cleanup(func() { rt.Remove(context.Background(), id) })
	pid = initPid(t, rt.StateRoot, id)
	deadline := time.Now().Add(15 * time.Second)
	for len(tcpListeners(t, pid, 3128)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the squatter did not bind 127.0.0.1:3128 within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, _, err = rt.Adopt(ctx, id)
	var le *native.ListenError
	if !errors.As(err, &le) || le.Addr != "127.0.0.1:3128" || !errors.Is(err, syscall.EADDRINUSE) ||
		!strings.Contains(err.Error(), "127.0.0.1:3128") || !strings.Contains(err.Error(), "inside the sandbox") {
		t.Fatalf("adopting a sandbox whose proxy address was taken: %v", err)
	}
	t.Logf("denied as expected: %v", err)
	// Nothing of this supervisor's stays behind: Remove still destroys it.
	if err := rt.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(rt.StateRoot, id)); !os.IsNotExist(err) {
		t.Fatal("state directory left after Remove")
	}
	if err := syscall.Kill(pid, 0); err == nil {
		// The init may be a zombie for a moment before it is reaped.
		time.Sleep(500 * time.Millisecond)
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); len(b) > 0 && !strings.Contains(string(b), ") Z") {
			t.Fatalf("init %d still alive after Remove", pid)
		}
	}
}

// initPid reads a sandbox's init pid from its state file.
func initPid(t *testing.T, stateRoot, id string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateRoot, id, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Init   int      `json:"init"`
		Listen []string `json:"listen"`
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Init <= 1 {
		t.Fatalf("state %s: %v", b, err)
	}
	if len(st.Listen) != 2 {
		t.Fatalf("state.json does not record the listen addresses: %s", b)
	}
	return st.Init
}

// tcpListeners returns the socket inodes of TCP sockets listening on port
// in pid's network namespace (/proc/PID/net/tcp and tcp6).
func tcpListeners(t *testing.T, pid, port int) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	hexPort := fmt.Sprintf("%04X", port)
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 {
				continue
			}
			if strings.HasSuffix(fs[1], ":"+hexPort) && fs[3] == "0A" {
				out[fs[9]] = true
			}
		}
	}
	return out
}

// socketInode is the inode of a listener's socket.
func socketInode(t *testing.T, l net.Listener) string {
	t.Helper()
	tl, ok := l.(*net.TCPListener)
	if !ok {
		t.Fatalf("listener %T is not TCP", l)
	}
	// Not File(): its Fd() would make the shared socket blocking.
	rc, err := tl.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), &st) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return strconv.FormatUint(st.Ino, 10)
}
