//go:build linux

package serve

// The service's API on every backend the daemon offers, from one table:
// each backend runs the same steps (create, exec with streamed output,
// background processes reattached by cursor, stdin, a PTY, files and tar
// up and down, a port tunnel, pause/resume, TTL, kill -9 of the daemon and re-adoption,
// delete leaving nothing on the host). A backend that is not installed is
// skipped with the reason (CI installs runsc, so it runs there).

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
)

// serveBackend is one runtime of the table.
type serveBackend struct {
	name string
	// skip is why it cannot run here ("" when it can).
	skip string
	// state is where the backend keeps a sandbox's host state, from the
	// daemon's state directory.
	state func(d *daemon) string
}

func serveBackends() []serveBackend {
	gv := serveBackend{name: gvisor.Name, state: func(d *daemon) string { return d.stateDir + "-gvisor" }}
	if os.Geteuid() != 0 {
		gv.skip = "gvisor sandboxes of the daemon need root (runsc's cgroups)"
	} else if _, err := gvisor.Find(); err != nil {
		gv.skip = err.Error()
	}
	return []serveBackend{
		{name: "native", state: func(d *daemon) string { return d.stateDir }},
		gv,
	}
}

// hostTraces lists what the host holds for the runtime sandbox rid: its
// state directory, runsc's state, cgroups and mounts that name it.
func hostTraces(d *daemon, b serveBackend, rid string) []string {
	var out []string
	for _, p := range []string{filepath.Join(b.state(d), rid)} {
		if exists(p) {
			out = append(out, p)
		}
	}
	for _, pat := range []string{b.state(d) + "/runsc/*" + rid + "*", "/sys/fs/cgroup/*/airlock*/" + rid, "/sys/fs/cgroup/*/airlock*/*/" + rid, "/sys/fs/cgroup/airlock*/" + rid, "/sys/fs/cgroup/airlock*/*/" + rid} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, rid) {
			out = append(out, "mount: "+l)
		}
	}
	return out
}

// sentryInCgroup checks that the gVisor sandbox whose state directory is
// dir has the host cgroup airlock made (recorded in cgroup.json, as a
// re-adopting daemon reads it) and that runsc's Sentry runs in every
// directory of it.
func sentryInCgroup(t *testing.T, dir string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "cgroup.json"))
	var paths []string
	if err == nil {
		err = json.Unmarshal(raw, &paths)
	}
	if err != nil || len(paths) == 0 {
		t.Fatalf("the sandbox's cgroup record: %v %q", err, raw)
	}
	for _, p := range paths {
		procs, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			t.Fatalf("cgroup %s: %v", p, err)
		}
		found := false
		for _, pid := range strings.Fields(string(procs)) {
			cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); argv0 == "runsc-sandbox" {
				found = true
			}
		}
		if !found {
			t.Errorf("no runsc-sandbox (the Sentry) in cgroup %s (processes %q)", p, procs)
		}
	}
}

func TestBackendService(t *testing.T) {
	need(t)
	for _, b := range serveBackends() {
		t.Run(b.name, func(t *testing.T) {
			if b.skip != "" {
				t.Skip(b.skip)
			}
			testBackendService(t, b)
		})
	}
}

func testBackendService(t *testing.T, b serveBackend) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, &api.CreateSandboxRequest{Runtime: b.name, Labels: map[string]string{"t": "backends"}})
	if sb.Runtime != b.name {
		t.Fatalf("created sandbox reports runtime %q, want %q", sb.Runtime, b.name)
	}
	rid := strings.TrimPrefix(sb.ID, "sb-")
	if !exists(filepath.Join(b.state(d), rid)) {
		t.Fatalf("no host state for the sandbox in %s", b.state(d))
	}

	t.Run("exec", func(t *testing.T) {
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
		if err != nil || res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
			t.Fatalf("exec: %+v %v", res, err)
		}
		_, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"no-such-command"}})
		wantCode(t, "missing command", err, http.StatusBadRequest)
		// A timeout kills the command and says so; a command that ends as
		// its timeout fires (the control) ran to its end and is not
		// "timed out" (it was, with exit code 0, in 2 of 6 tries).
		res, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sleep", "60"}, TimeoutSeconds: 0.5})
		if err != nil || !res.TimedOut || res.Signal != 9 {
			t.Fatalf("timeout: %+v %v", res, err)
		}
		for i := 0; i < 10; i++ {
			res, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}, TimeoutSeconds: 0.000001})
			if err != nil || res.TimedOut != (res.Signal == 9) || !res.TimedOut && res.ExitCode != 0 {
				t.Fatalf("a command racing its timeout: %+v %v", res, err)
			}
		}
	})

	// Stop signals from a command to the agent (PID 1) leave it answering,
	// as Linux's PID 1 ignores them without a handler: in gVisor's Sentry a
	// `kill -TSTP 1` froze the agent, and the next request hung. The same
	// signals to the command itself (the control) stop it.
	t.Run("stop-signals-to-agent", func(t *testing.T) {
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "kill -TSTP 1 && kill -TTIN 1 && kill -TTOU 1 && echo sent"}})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "sent\n" {
			t.Fatalf("kill -TSTP/-TTIN/-TTOU 1: %+v %v", res, err)
		}
		after, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err = d.c.Exec(after, sb.ID, &api.ExecRequest{Argv: []string{"echo", "alive"}})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "alive\n" {
			t.Fatalf("the agent stopped answering after stop signals to PID 1: %+v %v", res, err)
		}
		// The control: the signal does reach a process here (one that
		// traps it).
		res, err = d.c.Exec(after, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", `trap 'echo got-TSTP' TSTP; kill -TSTP $$; echo after`}})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "got-TSTP\nafter\n" {
			t.Fatalf("control: SIGTSTP to a command that traps it: %+v %v", res, err)
		}
	})

	t.Run("stream", func(t *testing.T) {
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: counting(20, "0.01")})
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		var exit *int
		if err := d.c.FollowOutput(ctx, sb.ID, p.ID, "", func(ev api.OutputEvent) error {
			switch ev.Kind {
			case api.EventStdout:
				out.Write(ev.Data)
			case api.EventStderr:
				errb.Write(ev.Data)
			case api.EventExit:
				exit = ev.ExitCode
			case api.EventLost:
				return fmt.Errorf("lost output: %+v", ev)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		wo, we := want(20)
		if out.String() != wo || errb.String() != we || exit == nil || *exit != 0 {
			t.Fatalf("followed output: stdout %q stderr %q exit %v", out.String(), errb.String(), exit)
		}
	})

	t.Run("reattach", func(t *testing.T) {
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: counting(30, "0.01")})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cursor, exited := "", false
		for conn := 0; !exited; conn++ {
			if conn > 300 {
				t.Fatal("too many reconnects")
			}
			s, err := d.c.Output(ctx, sb.ID, p.ID, client.OutputOptions{Cursor: cursor, Follow: true, SSE: conn%2 == 1})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2 && !exited; i++ {
				ev, err := s.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				switch ev.Kind {
				case api.EventStdout:
					out.Write(ev.Data)
				case api.EventExit:
					exited = true
				case api.EventLost:
					t.Fatalf("lost output: %+v", ev)
				}
				cursor = ev.Cursor
			}
			s.Close()
		}
		if wo, _ := want(30); out.String() != wo {
			t.Fatalf("reassembled stdout %q", out.String())
		}
		_, err = d.c.Output(ctx, sb.ID, p.ID, client.OutputOptions{Cursor: "12;DROP"})
		wantCode(t, "bad cursor", err, http.StatusBadRequest)
	})

	t.Run("stdin", func(t *testing.T) {
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "tr a-z A-Z; echo done"}, Stdin: []byte("hello stdin\n")})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "HELLO STDIN\ndone\n" {
			t.Fatalf("exec with stdin: %+v %v", res, err)
		}
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"cat"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.c.WriteStdin(ctx, sb.ID, p.ID, strings.NewReader("one\ntwo\n"), true); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := d.c.FollowOutput(ctx, sb.ID, p.ID, "", func(ev api.OutputEvent) error {
			if ev.Kind == api.EventStdout {
				out.Write(ev.Data)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if out.String() != "one\ntwo\n" {
			t.Fatalf("cat of streamed stdin: %q", out.String())
		}
	})

	t.Run("pty", func(t *testing.T) {
		s, err := d.c.PTY(ctx, sb.ID, api.PTYStart{ExecRequest: api.ExecRequest{Argv: []string{"sh"}}, Rows: 24, Cols: 80})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Resize(120, 40); err != nil {
			t.Fatal(err)
		}
		io.WriteString(s, "stty size; [ -t 0 ] && echo isatty; echo $((6*7))x; exit 3\n")
		var out bytes.Buffer
		got := make(chan struct{})
		go func() { io.Copy(&out, s); close(got) }()
		exit, err := s.Wait()
		<-got
		if err != nil || exit.ExitCode != 3 {
			t.Fatalf("pty exit: %+v %v (output %q)", exit, err, out.String())
		}
		if o := out.String(); !strings.Contains(o, "40 120") || !strings.Contains(o, "isatty") || !strings.Contains(o, "42x") {
			t.Fatalf("pty output %q", o)
		}
	})

	t.Run("files", func(t *testing.T) {
		// /proc takes no files (the control is the workspace write
		// below).
		if err := d.c.WriteFile(ctx, sb.ID, "/proc/airlock-test.txt", 0o640, strings.NewReader("no\n")); err == nil {
			t.Fatal("write into /proc: no error")
		} else if !strings.Contains(err.Error(), "/proc/airlock-test.txt") || strings.Contains(err.Error(), ".airlock-write") {
			t.Errorf("write into /proc: %v, want the error to name the file asked for", err)
		}
		if err := d.c.Mkdir(ctx, sb.ID, "/workspace/dir", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := d.c.WriteFile(ctx, sb.ID, "/workspace/dir/a.txt", 0o640, strings.NewReader("alpha\n")); err != nil {
			t.Fatal(err)
		}
		if out := d.sh(t, sb.ID, "cat /workspace/dir/a.txt; stat -c %a /workspace/dir/a.txt"); out != "alpha\n640\n" {
			t.Fatalf("written file inside: %q", out)
		}
		rc, fi, err := d.c.ReadFile(ctx, sb.ID, "/workspace/dir/a.txt", client.DownloadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(rc)
		rc.Close()
		if string(body) != "alpha\n" || fi.Size != 6 {
			t.Fatalf("read back %q %+v", body, fi)
		}
		_, _, err = d.c.ReadFile(ctx, sb.ID, "/workspace/missing", client.DownloadOptions{})
		wantCode(t, "read of a missing file", err, http.StatusNotFound)

		// tar up: a tree extracted into /workspace/up.
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for name, content := range map[string]string{"up/x.txt": "x\n", "up/sub/y.txt": "yy\n"} {
			tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})
			tw.Write([]byte(content))
		}
		tw.Close()
		if err := d.c.Upload(ctx, sb.ID, "/workspace", &buf); err != nil {
			t.Fatal(err)
		}
		if out := d.sh(t, sb.ID, "cat /workspace/up/x.txt /workspace/up/sub/y.txt"); out != "x\nyy\n" {
			t.Fatalf("uploaded tree: %q", out)
		}
		// An entry that would leave the directory is refused.
		buf.Reset()
		tw = tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "../escape.txt", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
		tw.Write([]byte("e"))
		tw.Close()
		if err := d.c.Upload(ctx, sb.ID, "/workspace/up", &buf); err == nil {
			t.Fatal("upload of ../escape.txt: no error")
		}
		if out := d.sh(t, sb.ID, "ls /workspace/escape.txt 2>&1 || true"); !strings.Contains(out, "No such file") {
			t.Fatalf("escape.txt exists after a refused upload: %q", out)
		}
		// tar down: the tree as an archive, and extracted on the host.
		dst := t.TempDir()
		if _, err := d.c.DownloadTo(ctx, sb.ID, "/workspace/up", filepath.Join(dst, "up"), client.DownloadOptions{}); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dst, "up", "sub", "y.txt")); err != nil || string(b) != "yy\n" {
			t.Fatalf("downloaded y.txt: %q %v", b, err)
		}
	})

	t.Run("large", func(t *testing.T) {
		// Answers larger than one packet of the control channel: 3 MB of
		// output, a 1200-entry listing.
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x"}})
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := d.c.FollowOutput(ctx, sb.ID, p.ID, "", func(ev api.OutputEvent) error {
			switch ev.Kind {
			case api.EventStdout:
				if strings.Trim(string(ev.Data), "x") != "" {
					return fmt.Errorf("unexpected bytes at %d", ev.Offset)
				}
				n += len(ev.Data)
			case api.EventLost:
				return fmt.Errorf("lost output: %+v", ev)
			}
			return nil
		}); err != nil || n != 3000000 {
			t.Fatalf("3 MB of output: %d bytes, %v", n, err)
		}
		d.sh(t, sb.ID, "mkdir /workspace/many && cd /workspace/many && i=0; while [ $i -lt 1200 ]; do : > file-with-a-longish-name-$i; i=$((i+1)); done")
		ents, err := d.c.List(ctx, sb.ID, "/workspace/many")
		if err != nil || len(ents) != 1200 {
			t.Fatalf("listing of 1200 files: %d entries, %v", len(ents), err)
		}
		d.sh(t, sb.ID, "rm -r /workspace/many")
	})

	t.Run("port", func(t *testing.T) {
		// Nothing listens yet: 503; the control is the same port once a
		// server inside listens on it.
		_, err := d.c.DialPort(ctx, sb.ID, 7071)
		wantCode(t, "tunnel to a port nothing listens on", err, http.StatusServiceUnavailable)
		srv := "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('127.0.0.1', 7071))\ns.listen(1)\nprint('ready', flush=True)\nc, _ = s.accept()\nc.sendall(c.recv(100).upper())\nc.close()\n"
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"python3", "-c", srv}})
		if err != nil {
			t.Fatal(err)
		}
		st, err := d.c.Output(ctx, sb.ID, p.ID, client.OutputOptions{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := st.Next()
		st.Close()
		if err != nil || string(ev.Data) != "ready\n" {
			t.Fatalf("server output: %+v %v", ev, err)
		}
		tun, err := d.c.DialPort(ctx, sb.ID, 7071)
		if err != nil {
			t.Fatal(err)
		}
		defer tun.Close()
		io.WriteString(tun, "hello tunnel\n")
		got, err := io.ReadAll(tun)
		if err != nil || string(got) != "HELLO TUNNEL\n" {
			t.Fatalf("through the tunnel: %q %v", got, err)
		}
	})

	t.Run("pause", func(t *testing.T) {
		p, err := d.c.Pause(ctx, sb.ID)
		if err != nil || p.State != api.StatePaused {
			t.Fatalf("pause: %+v %v", p, err)
		}
		_, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}})
		wantCode(t, "exec in a paused sandbox", err, http.StatusConflict)
		if p, err := d.c.Resume(ctx, sb.ID); err != nil || p.State != api.StateRunning {
			t.Fatalf("resume: %+v %v", p, err)
		}
		if out := d.sh(t, sb.ID, "echo resumed"); out != "resumed\n" {
			t.Fatalf("after resume: %q", out)
		}
	})

	t.Run("restart", func(t *testing.T) {
		// A background process that outlives the daemon: its output goes
		// on, and the restarted daemon reattaches to it by cursor.
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo before; read x; echo after:$x"}})
		if err != nil {
			t.Fatal(err)
		}
		cursor := ""
		s, err := d.c.Output(ctx, sb.ID, p.ID, client.OutputOptions{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := s.Next()
		s.Close()
		if err != nil || string(ev.Data) != "before\n" {
			t.Fatalf("first output: %+v %v", ev, err)
		}
		cursor = ev.Cursor
		// Paused when the daemon dies: paused again after re-adoption.
		if p, err := d.c.Pause(ctx, sb.ID); err != nil || p.State != api.StatePaused {
			t.Fatalf("pause: %+v %v", p, err)
		}
		d.restart(syscall.SIGKILL)
		got, err := d.c.GetSandbox(ctx, sb.ID)
		if err != nil || got.State != api.StatePaused || got.Runtime != b.name {
			t.Fatalf("after kill -9 and restart: %+v %v\n%s", got, err, tail(d.Logs(), 30))
		}
		if got, err = d.c.Resume(ctx, sb.ID); err != nil || got.State != api.StateRunning {
			t.Fatalf("resume after restart: %+v %v", got, err)
		}
		if err := d.c.WriteStdin(ctx, sb.ID, p.ID, strings.NewReader("go\n"), true); err != nil {
			t.Fatalf("stdin of the re-adopted process: %v", err)
		}
		var out bytes.Buffer
		if err := d.c.FollowOutput(ctx, sb.ID, p.ID, cursor, func(ev api.OutputEvent) error {
			if ev.Kind == api.EventStdout {
				out.Write(ev.Data)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if out.String() != "after:go\n" {
			t.Fatalf("output after the cursor: %q", out.String())
		}
		if out := d.sh(t, sb.ID, "cat /workspace/dir/a.txt"); out != "alpha\n" {
			t.Fatalf("workspace after restart: %q", out)
		}
	})

	t.Run("ttl", func(t *testing.T) {
		short := d.create(t, &api.CreateSandboxRequest{Runtime: b.name, TimeoutSeconds: 2})
		srid := strings.TrimPrefix(short.ID, "sb-")
		if out := d.sh(t, short.ID, "echo alive"); out != "alive\n" {
			t.Fatalf("control: %q", out)
		}
		eventually(t, 60*time.Second, "the TTL to stop the sandbox", func() bool {
			got, err := d.c.GetSandbox(ctx, short.ID)
			return err == nil && got.State == api.StateStopped
		})
		eventually(t, 30*time.Second, "the stopped sandbox's host state to go", func() bool { return len(hostTraces(d, b, srid)) == 0 })
	})

	t.Run("delete", func(t *testing.T) {
		if len(hostTraces(d, b, rid)) == 0 {
			t.Fatal("control: no host traces of a running sandbox found")
		}
		if b.name == gvisor.Name {
			sentryInCgroup(t, filepath.Join(b.state(d), rid))
		}
		if _, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sleep", "600"}}); err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := d.c.DeleteSandbox(dctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		_, err := d.c.GetSandbox(ctx, sb.ID)
		wantCode(t, "get after delete", err, http.StatusNotFound)
		eventually(t, 30*time.Second, "nothing left on the host", func() bool { return len(hostTraces(d, b, rid)) == 0 })
	})
}
