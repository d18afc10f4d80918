//go:build linux

package serve

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

func needRecordRoot(t *testing.T) {
	t.Helper()
	need(t)
	if os.Geteuid() != 0 {
		t.Skip("the activity record needs a daemon running as root (proc connector)")
	}
}

// allEvents reads every event of a sandbox's record q selects, page by
// page.
func recordEvents(t *testing.T, c *client.Client, id string, q client.EventsQuery) []api.RecordEvent {
	t.Helper()
	var out []api.RecordEvent
	q.Limit = 1000
	for i := 0; i < 1000; i++ {
		page, err := c.Events(ctxT(t), id, q)
		if err != nil {
			t.Fatalf("events of %s: %v", id, err)
		}
		out = append(out, page.Events...)
		if page.NextCursor == "" {
			return out
		}
		q.Cursor = page.NextCursor
	}
	t.Fatal("more than 1000 pages")
	return nil
}

// waitEvent follows the record from cursor until an event match accepts
// (bounded by a minute), and returns it.
func waitEvent(t *testing.T, c *client.Client, id, cursor string, what string, match func(api.RecordEvent) bool) api.RecordEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got api.RecordEvent
	found := errors.New("found")
	err := c.FollowEvents(ctx, id, client.EventsQuery{Cursor: cursor}, func(ev api.RecordEvent) error {
		if match(ev) {
			got = ev
			return found
		}
		return nil
	})
	if err != found {
		t.Fatalf("waiting for %s in the record of %s: %v", what, id, err)
	}
	return got
}

func argvKey(a [][]string) []string {
	var out []string
	for _, x := range a {
		out = append(out, strings.Join(x, "\x00"))
	}
	sort.Strings(out)
	return out
}

func execsOf(evs []api.RecordEvent) []api.RecordEvent {
	var out []api.RecordEvent
	for _, e := range evs {
		if e.Type == api.RecordExec {
			out = append(out, e)
		}
	}
	return out
}

// TestRecordServiceScript: a sandbox made with record: true runs a shell
// script that starts 200 processes; its record holds exactly those 200
// execs (argv, parent, working directory, result) and their exits, none
// missing, none invented. A sandbox made without record answers 409 for
// its events (next to the record sandbox's 200).
func TestRecordServiceScript(t *testing.T) {
	needRecordRoot(t)
	d := startDaemon(t, "")
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{Record: true})
	if err != nil {
		t.Fatal(err)
	}
	if !sb.Record {
		t.Fatalf("sandbox made with record: true shows record false: %+v", sb)
	}
	plain, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Record {
		t.Fatalf("sandbox made without record shows record true")
	}
	_, err = d.c.Events(ctx, plain.ID, client.EventsQuery{})
	wantCode(t, "events of a sandbox without record", err, http.StatusConflict)
	if !strings.Contains(err.Error(), "without an activity record") {
		t.Errorf("409 does not say why: %v", err)
	}
	_, err = d.c.Events(ctx, sb.ID, client.EventsQuery{Types: []string{"bogus"}})
	wantCode(t, "a type that does not exist", err, http.StatusBadRequest)

	start := recordEvents(t, d.c, sb.ID, client.EventsQuery{})
	if len(start) == 0 || start[0].Type != api.RecordStart || start[0].Sandbox != sb.ID {
		t.Fatalf("the record does not begin with its start event: %+v", start)
	}
	if ex := execsOf(start); len(ex) != 0 {
		t.Fatalf("execs before anything ran: %+v", ex)
	}
	cursor := start[len(start)-1].Cursor

	script := `i=1
while [ $i -le 199 ]; do /bin/true "n=$i"; i=$((i+1)); done
exit 3`
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", script}})
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("script: %+v %v", res, err)
	}
	// The shell exits last: once its exit is stored, every event of the
	// script is.
	shell := waitEvent(t, d.c, sb.ID, cursor, "the script's exec", func(ev api.RecordEvent) bool {
		return ev.Type == api.RecordExec && len(ev.Argv) == 3 && ev.Argv[2] == script
	})
	waitEvent(t, d.c, sb.ID, shell.Cursor, "the script's exit", func(ev api.RecordEvent) bool {
		return ev.Type == api.RecordExit && ev.HostPid == shell.HostPid
	})
	evs := recordEvents(t, d.c, sb.ID, client.EventsQuery{Cursor: cursor})
	want := [][]string{{"/bin/sh", "-c", script}}
	for i := 1; i <= 199; i++ {
		want = append(want, []string{"/bin/true", fmt.Sprintf("n=%d", i)})
	}
	var got [][]string
	execs := execsOf(evs)
	for _, e := range execs {
		got = append(got, e.Argv)
		if e.Result != "ok" {
			t.Errorf("exec %q: result %q", e.Argv, e.Result)
		}
	}
	if len(got) != 200 || !slices.Equal(argvKey(got), argvKey(want)) {
		t.Fatalf("recorded execs differ from the script's: got %d, want 200", len(got))
	}
	exits := map[int]api.RecordEvent{}
	for _, e := range evs {
		switch e.Type {
		case api.RecordExit:
			exits[e.HostPid] = e
		case api.RecordLoss:
			t.Errorf("loss event: %+v", e)
		}
	}
	if shell.PPid != 1 || shell.Cwd != "/workspace" || shell.Path != "/bin/sh" {
		t.Errorf("the script's exec: %+v", shell)
	}
	for _, e := range execs {
		x, ok := exits[e.HostPid]
		if !ok || x.Lost || x.Pid != e.Pid {
			t.Errorf("no exit for %q (host pid %d): %+v", e.Argv, e.HostPid, x)
			continue
		}
		if e.Argv[0] == "/bin/true" {
			if e.PPid != shell.Pid || e.Path != "/bin/true" || e.Cwd != "/workspace" {
				t.Errorf("loop exec: %+v (shell pid %d)", e, shell.Pid)
			}
			if !x.Exited || x.Code == nil || *x.Code != 0 || x.DurationMs == nil {
				t.Errorf("exit of %q: %+v", e.Argv, x)
			}
		}
	}
	if x := exits[shell.HostPid]; x.Code == nil || *x.Code != 3 {
		t.Errorf("the shell's exit: %+v", x)
	}
	// Filters: type=exec gives exactly the execs.
	only := recordEvents(t, d.c, sb.ID, client.EventsQuery{Types: []string{api.RecordExec}, Cursor: cursor})
	if len(only) != 200 || len(execsOf(only)) != 200 {
		t.Errorf("type=exec: %d events, %d execs", len(only), len(execsOf(only)))
	}
}

// TestRecordServiceHiding: exec of a memfd through /proc/self/fd/N, and a
// process that rewrites its own argv: the record has the truth. The
// controls show each trick ran.
func TestRecordServiceHiding(t *testing.T) {
	needRecordRoot(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3")
	}
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("needs perl")
	}
	d := startDaemon(t, "")
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{Record: true, Files: []api.File{{Path: "h.py", Content: []byte(`import os
fd = os.memfd_create("innocent", 0)
os.write(fd, open("/bin/echo", "rb").read())
pid = os.fork()
if pid == 0:
    os.execve("/proc/self/fd/%d" % fd, ["hidden-one", "memfd-path-ran"], {})
os.waitpid(pid, 0)
`)}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", `python3 h.py; perl -e '$0 = "innocent-name"; open(F, "/proc/self/cmdline"); my $c = <F>; $c =~ s/\0/ /g; print "cmdline: $c\n"; system("/bin/true", "child-of-rewritten")'`}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("tricks: %+v %v", res, err)
	}
	for _, w := range []string{"memfd-path-ran", "cmdline: innocent-name"} {
		if !strings.Contains(string(res.Stdout), w) {
			t.Fatalf("control: the trick did not work (%q missing): %q %q", w, res.Stdout, res.Stderr)
		}
	}
	child := waitEvent(t, d.c, sb.ID, "", "the rewritten process's child", func(ev api.RecordEvent) bool {
		return ev.Type == api.RecordExec && slices.Equal(ev.Argv, []string{"/bin/true", "child-of-rewritten"})
	})
	if child.Result != "ok" {
		t.Errorf("child exec: %+v", child)
	}
	var viaMemfd, perl bool
	for _, e := range execsOf(recordEvents(t, d.c, sb.ID, client.EventsQuery{})) {
		switch {
		case slices.Equal(e.Argv, []string{"hidden-one", "memfd-path-ran"}):
			viaMemfd = strings.HasPrefix(e.Path, "/proc/self/fd/") && strings.HasPrefix(e.PathTarget, "/memfd:innocent") && e.Result == "ok"
			if !viaMemfd {
				t.Errorf("memfd exec: %+v", e)
			}
		case len(e.Argv) == 3 && e.Argv[0] == "perl" && strings.HasPrefix(e.Argv[2], `$0 = "innocent-name"`):
			perl = e.Result == "ok"
		}
		if len(e.Argv) > 0 && e.Argv[0] == "innocent-name" {
			t.Errorf("the record took the rewritten argv: %+v", e)
		}
	}
	if !viaMemfd || !perl {
		t.Errorf("missing from the record: memfd %v, perl's argv at exec %v", viaMemfd, perl)
	}

	// The init keeps a copy of the exec listener: nothing in the sandbox
	// reaches it, through /proc/1/fd (the control: /proc/self/fd lists)
	// or pidfd_getfd on the init.
	res, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", "ls /proc/self/fd >/dev/null && echo self-ok; ls -l /proc/1/fd/ 2>&1; echo; python3 -c '" + `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
pfd = libc.syscall(434, 1, 0)
got = []
for fd in range(64):
    r = libc.syscall(438, pfd, fd, 0)
    if r >= 0:
        got.append(os.readlink("/proc/self/fd/%d" % r))
print("pidfd", pfd, "got", got)
` + "'"}})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	if !strings.Contains(out, "self-ok") || strings.Contains(out, "seccomp") || !strings.Contains(out, "got []") {
		t.Errorf("the init's listener is reachable from the sandbox, or the control failed:\n%s%s", out, res.Stderr)
	}
}

// TestRecordServiceFollowTenantsRestart: following (NDJSON and SSE) sees
// new events live; another tenant's key gets 404 (its own tenant's
// key, 200); kill -9 of the daemon keeps the record and the sandbox: an
// exec while no daemon runs waits in the kernel, and runs, recorded, once
// a new daemon has taken the listener back; the record is in the store
// until the sandbox is deleted, then gone.
func TestRecordServiceFollowTenantsRestart(t *testing.T) {
	needRecordRoot(t)
	addr := testdaemon.FreeAddr(t)
	d := startDaemon(t, "listen: "+addr+"\n")
	ctx := ctxT(t)
	tenantKey := func(name, tenant string) *client.Client {
		t.Helper()
		k, err := d.c.CreateTenantKey(ctx, name, tenant)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := client.New("http://"+addr, k.Key)
		return c
	}
	acme, globex := tenantKey("a", "acme"), tenantKey("g", "globex")
	sb, err := acme.CreateSandbox(ctx, &api.CreateSandboxRequest{Record: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acme.Events(ctx, sb.ID, client.EventsQuery{}); err != nil {
		t.Fatalf("its tenant's key: %v", err)
	}
	_, err = globex.Events(ctx, sb.ID, client.EventsQuery{})
	wantCode(t, "another tenant's key", err, http.StatusNotFound)
	_, err = globex.EventsStream(ctx, sb.ID, client.EventsQuery{}, false)
	wantCode(t, "another tenant's key, follow", err, http.StatusNotFound)

	// Follow: streams opened now see an exec made after they opened.
	for _, sse := range []bool{false, true} {
		s, err := acme.EventsStream(ctx, sb.ID, client.EventsQuery{Types: []string{api.RecordExec}}, sse)
		if err != nil {
			t.Fatal(err)
		}
		marker := fmt.Sprintf("live-%v", sse)
		if _, err := acme.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/true", marker}}); err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			ev, err := s.Next()
			if err != nil || i > 100 {
				t.Fatalf("follow (sse %v): %v after %d events", sse, err, i)
			}
			if ev.Type != api.RecordExec {
				t.Fatalf("type=exec stream gave %+v", ev)
			}
			if slices.Equal(ev.Argv, []string{"/bin/true", marker}) {
				break
			}
		}
		s.Close()
	}

	// A background process that will exec once a fifo is written, from
	// the host, while no daemon runs.
	if _, err := acme.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"mkfifo", "/tmp/go"}}); err != nil {
		t.Fatal(err)
	}
	bg, err := acme.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", "read x < /tmp/go; /bin/true waited-for-the-daemon; echo done"}})
	if err != nil {
		t.Fatal(err)
	}
	bgExec := waitEvent(t, acme, sb.ID, "", "the background shell's exec", func(ev api.RecordEvent) bool {
		return ev.Type == api.RecordExec && len(ev.Argv) == 3 && strings.HasPrefix(ev.Argv[2], "read x")
	})
	before := recordEvents(t, d.c, sb.ID, client.EventsQuery{})

	d.Stop(syscall.SIGKILL)
	// No daemon: the shell reads the fifo, then its exec waits in the
	// kernel (the init keeps the listener open: no ENOSYS, no exec).
	fifo, err := os.OpenFile(fmt.Sprintf("/proc/%d/root/tmp/go", bgExec.HostPid), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fifo.Write([]byte("x\n"))
	fifo.Close()
	execNr := map[string]string{"amd64": "59", "arm64": "221"}[goruntime.GOARCH]
	if execNr != "" {
		// The shell itself, or the child it forked (vfork) for the
		// command, sits in execve.
		blocked := func() bool {
			pids := []string{fmt.Sprint(bgExec.HostPid)}
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", bgExec.HostPid, bgExec.HostPid)); err == nil {
				pids = append(pids, strings.Fields(string(b))...)
			}
			for _, p := range pids {
				b, err := os.ReadFile("/proc/" + p + "/syscall")
				if err == nil && strings.HasPrefix(string(b), execNr+" ") {
					return true
				}
			}
			return false
		}
		deadline := time.Now().Add(30 * time.Second)
		for !blocked() {
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", bgExec.HostPid))
				t.Fatalf("the background shell is not waiting in execve with no daemon: %q", b)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// It stays there: no daemon answers.
		time.Sleep(300 * time.Millisecond)
		if !blocked() {
			t.Fatal("an exec went on while no daemon ran")
		}
	}
	d.StartProcess()
	d.c = d.C
	p, err := d.c.WaitProcess(ctx, sb.ID, bg.ID, time.Minute)
	if err != nil || p.ExitCode == nil || *p.ExitCode != 0 {
		t.Fatalf("background process after the restart: %+v %v", p, err)
	}
	if _, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/true", "after-restart"}}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, d.c, sb.ID, before[len(before)-1].Cursor, "the exec after the restart", func(ev api.RecordEvent) bool {
		return ev.Type == api.RecordExec && slices.Equal(ev.Argv, []string{"/bin/true", "after-restart"}) && ev.Result == "ok"
	})
	after := recordEvents(t, d.c, sb.ID, client.EventsQuery{})
	if len(after) < len(before) {
		t.Fatalf("events lost in the restart: %d before, %d after", len(before), len(after))
	}
	for i := range before {
		a, b := after[i], before[i]
		if a.Cursor != b.Cursor || a.Type != b.Type || !slices.Equal(a.Argv, b.Argv) {
			t.Fatalf("event %d changed in the restart: %+v, was %+v", i, a, b)
		}
	}
	var waited, loss bool
	for _, e := range after[len(before):] {
		if e.Type == api.RecordExec && slices.Equal(e.Argv, []string{"/bin/true", "waited-for-the-daemon"}) {
			waited = e.Result == "ok"
		}
		if e.Type == api.RecordLoss && strings.Contains(e.Reason, "daemon restarted") {
			loss = true
		}
	}
	if !waited || !loss {
		t.Errorf("after the restart: the exec that waited recorded %v, the restart's loss event %v", waited, loss)
	}

	// Deleted: the record goes with it (the API, and the store's rows).
	if err := acme.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = acme.Events(ctx, sb.ID, client.EventsQuery{})
	wantCode(t, "events of a deleted sandbox", err, http.StatusNotFound)
	d.Stop(syscall.SIGTERM)
	db, err := sql.Open("sqlite", filepath.Join(d.DataDir, "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	var n, all int
	err = db.QueryRow(`SELECT COUNT(*) FROM record_events WHERE sandbox_id = ?`, sb.ID).Scan(&n)
	if err == nil {
		err = db.QueryRow(`SELECT COUNT(*) FROM record_events`).Scan(&all)
	}
	db.Close()
	if err != nil || n != 0 {
		t.Errorf("record rows of the deleted sandbox: %d (%v)", n, err)
	}
	d.StartProcess()
	d.c = d.C
}

// TestRecordServiceCLI: airlock create --record, airlock events --type
// exec --json, and the one-line error for a sandbox without a record.
func TestRecordServiceCLI(t *testing.T) {
	needRecordRoot(t)
	d := startDaemon(t, "")
	ctx := ctxT(t)
	host := "unix://" + d.sock
	out, err := exec.Command(airlockBin, "create", "--host", host, "--record").Output()
	if err != nil {
		t.Fatalf("create --record: %v", err)
	}
	id := strings.TrimSpace(string(out))
	if sb, err := d.c.GetSandbox(ctx, id); err != nil || !sb.Record {
		t.Fatalf("create --record made %+v %v", sb, err)
	}
	if _, err := d.c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"/bin/true", "from-cli"}}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, d.c, id, "", "the exec", func(ev api.RecordEvent) bool {
		return ev.Type == api.RecordExec && slices.Equal(ev.Argv, []string{"/bin/true", "from-cli"})
	})
	out, err = exec.Command(airlockBin, "events", "--host", host, id, "--type", "exec", "--json").Output()
	if err != nil {
		t.Fatalf("events --json: %v", err)
	}
	var seen bool
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var ev api.RecordEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Type != api.RecordExec {
			t.Fatalf("events --type exec --json line %q: %v", line, err)
		}
		seen = seen || slices.Equal(ev.Argv, []string{"/bin/true", "from-cli"})
	}
	if !seen {
		t.Errorf("events --json lacks the exec:\n%s", out)
	}
	out, err = exec.Command(airlockBin, "events", "--host", host, id).Output()
	if err != nil || !strings.Contains(string(out), `["/bin/true","from-cli"]`) {
		t.Errorf("events (table): %v\n%s", err, out)
	}
	plain, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(airlockBin, "events", "--host", host, plain.ID)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Stdout = io.Discard
	err = cmd.Run()
	if err == nil || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 || !strings.Contains(stderr.String(), "without an activity record") {
		t.Errorf("events of a sandbox without record: %v %q", err, stderr.String())
	}
}

// TestRecordServiceNetAndPool: a record sandbox with network access has
// its gateway's requests in the record (allowed and denied, as the
// network audit has them); a daemon with a warm pool makes a record
// sandbox cold, with its record (start event, execs), not from the pool.
func TestRecordServiceNetAndPool(t *testing.T) {
	needRecordRoot(t)
	up := newUpstream(t)
	d := startDaemon(t, netHosts+"pools:\n  - policy: default\n    size: 1\n")
	eventually(t, 2*time.Minute, "a full pool", func() bool {
		return d.metric(t, `airlock_pool_ready{image="",policy="default"}`) == 1
	})
	sb := d.create(t, &api.CreateSandboxRequest{Record: true})
	if !sb.Record {
		t.Fatal("record sandbox shows record false")
	}
	if _, err := d.c.Exec(ctxT(t), sb.ID, &api.ExecRequest{Argv: []string{"/bin/true", "pool-check"}}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, d.c, sb.ID, "", "the exec", func(ev api.RecordEvent) bool {
		return ev.Type == api.RecordExec && slices.Equal(ev.Argv, []string{"/bin/true", "pool-check"})
	})
	if evs := recordEvents(t, d.c, sb.ID, client.EventsQuery{}); evs[0].Type != api.RecordStart {
		t.Fatalf("the record sandbox's record does not start with start: %+v", evs[0])
	}

	nsb := d.create(t, &api.CreateSandboxRequest{Policy: netPolicy, Record: true})
	p := up.port
	out := d.sh(t, nsb.ID, curl("http://api.test:"+p+"/a")+curl("http://other.test:"+p+"/c")+"true")
	if out != "200 403 " {
		t.Fatalf("requests: %q", out)
	}
	// Followed (type=net) until both are in: the gateway's records are
	// copied into the record as they are made.
	var allowed, denied bool
	waitEvent(t, d.c, nsb.ID, "", "the allowed and the denied request", func(e api.RecordEvent) bool {
		if e.Type != api.RecordNet || e.Allowed == nil {
			return false
		}
		allowed = allowed || (*e.Allowed && e.Host == "api.test" && e.URLPath == "/a" && e.Method == "GET")
		denied = denied || (!*e.Allowed && e.Host == "other.test" && e.Rule != "")
		return allowed && denied
	})
	for _, e := range recordEvents(t, d.c, nsb.ID, client.EventsQuery{Types: []string{api.RecordNet}}) {
		if e.Type != api.RecordNet {
			t.Fatalf("type=net gave %+v", e)
		}
	}
	if !allowed || !denied {
		t.Fatalf("net events in the record: allowed %v, denied %v", allowed, denied)
	}
}

// TestRecordServiceCap: a record is bounded (record_max_events): the first
// events are kept, the last kept is a loss event saying the record is
// full, and later execs (which still run) are not stored. The control: a
// daemon with the default bound keeps every exec of the same script.
func TestRecordServiceCap(t *testing.T) {
	needRecordRoot(t)
	const script = `i=0; while [ $i -lt 150 ]; do /bin/true "c$i"; i=$((i+1)); done`
	for _, capped := range []bool{true, false} {
		extra := ""
		if capped {
			extra = "record_max_events: 100\n"
		}
		d := startDaemon(t, extra)
		ctx := ctxT(t)
		sb := d.create(t, &api.CreateSandboxRequest{Record: true})
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", script + "; /bin/true last"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("script: %+v %v", res, err)
		}
		// A second exec waits until the first one's are settled; with
		// the cap, the record ends in its loss event.
		if capped {
			waitEvent(t, d.c, sb.ID, "", "the loss event", func(ev api.RecordEvent) bool {
				return ev.Type == api.RecordLoss && strings.Contains(ev.Reason, "full")
			})
			if _, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/true", "past-the-cap"}}); err != nil {
				t.Fatalf("an exec past the cap does not run: %v", err)
			}
			// End the sandbox (its TTL): everything it made is stored
			// before it is final, and a follow ends then.
			if _, err := d.c.SetTimeout(ctx, sb.ID, 10*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			fctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := d.c.FollowEvents(fctx, sb.ID, client.EventsQuery{}, func(api.RecordEvent) error { return nil })
			cancel()
			if err != nil {
				t.Fatalf("follow until the sandbox ends: %v", err)
			}
			evs := recordEvents(t, d.c, sb.ID, client.EventsQuery{})
			if len(evs) != 100 || evs[99].Type != api.RecordLoss || evs[0].Type != api.RecordStart {
				t.Fatalf("capped record: %d events, first %+v, last %+v", len(evs), evs[0], evs[len(evs)-1])
			}
			continue
		}
		waitEvent(t, d.c, sb.ID, "", "the last exec", func(ev api.RecordEvent) bool {
			return ev.Type == api.RecordExec && slices.Equal(ev.Argv, []string{"/bin/true", "last"})
		})
		if n := len(execsOf(recordEvents(t, d.c, sb.ID, client.EventsQuery{}))); n != 152 {
			t.Fatalf("uncapped record: %d execs, want 152", n)
		}
	}
}

// TestRecordServiceRefused: a daemon that cannot keep a record (here, one
// without cgroups, whose usage the record samples) refuses record: true
// with 501 naming the record, and nothing is left of the sandbox; the
// control: a sandbox without record is made there.
func TestRecordServiceRefused(t *testing.T) {
	needRecordRoot(t)
	d := startDaemon(t, "insecure:\n  no_cgroups: true\n")
	ctx := ctxT(t)
	_, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{Record: true})
	wantCode(t, "record without cgroups", err, http.StatusNotImplemented)
	if !strings.Contains(err.Error(), "record") {
		t.Errorf("the refusal does not name the record: %v", err)
	}
	list, err := d.c.AllSandboxes(ctx, client.ListOptions{})
	if err != nil || len(list) != 0 {
		t.Fatalf("a refused creation left sandboxes: %+v %v", list, err)
	}
	plain := d.create(t, &api.CreateSandboxRequest{})
	if plain.Record {
		t.Fatal("control sandbox shows record")
	}
	if _, err := d.c.Events(ctx, plain.ID, client.EventsQuery{}); err == nil {
		t.Fatal("events of a sandbox without record: no error")
	}
}
