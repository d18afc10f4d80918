package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/record"
)

// recorded runs script with --record into a fresh file outside anything
// the sandbox sees, and returns the run and the record's events.
func recorded(t *testing.T, o opts, flags []string, script string) (result, []record.Event) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "record.jsonl")
	r := sh(t, o, append([]string{"--record", file}, flags...), script)
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("record file: %v\n%s", err, r)
	}
	defer f.Close()
	evs, err := record.Read(f)
	if err != nil {
		t.Fatalf("read the record: %v", err)
	}
	if len(evs) < 2 || evs[0].Type != record.TypeStart || evs[len(evs)-1].Type != record.TypeEnd {
		t.Fatalf("record does not run from start to end: %d events", len(evs))
	}
	return r, evs
}

func ofType(evs []record.Event, typ string) []record.Event {
	var out []record.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// exitsByHostPid indexes the exit events; a pid with two exits fails t.
func exitsByHostPid(t *testing.T, evs []record.Event) map[int]record.Event {
	t.Helper()
	m := map[int]record.Event{}
	for _, e := range ofType(evs, record.TypeExit) {
		if _, dup := m[e.HostPid]; dup {
			t.Errorf("two exits for host pid %d", e.HostPid)
		}
		m[e.HostPid] = e
	}
	return m
}

// TestRecordScriptExact: a script of 201 execs (195 in a loop, and a few
// with known argv, through env and a nested shell) is recorded exactly:
// every exec with its argv, none missing, none invented, each successful,
// and an exit for every process that ran one.
func TestRecordScriptExact(t *testing.T) {
	needRoot(t)
	script := `i=1
while [ $i -le 195 ]; do /bin/true "n=$i"; i=$((i+1)); done
/bin/echo one 'two three' >/dev/null
/usr/bin/env X=1 /bin/true via-env
/bin/sh -c '/bin/true nested; :'
exit 3`
	r, evs := recorded(t, opts{}, nil, script)
	if r.code != 3 {
		t.Fatalf("want the script's exit 3\n%s", r)
	}
	want := [][]string{{"/bin/sh", "-c", script}}
	for i := 1; i <= 195; i++ {
		want = append(want, []string{"/bin/true", fmt.Sprintf("n=%d", i)})
	}
	want = append(want, []string{"/bin/echo", "one", "two three"},
		[]string{"/usr/bin/env", "X=1", "/bin/true", "via-env"}, []string{"/bin/true", "via-env"},
		[]string{"/bin/sh", "-c", "/bin/true nested; :"}, []string{"/bin/true", "nested"})
	execs := ofType(evs, record.TypeExec)
	var got [][]string
	for _, e := range execs {
		if e.Result != record.ResultOK {
			t.Errorf("exec %q: result %q", e.Argv, e.Result)
		}
		got = append(got, e.Argv)
	}
	key := func(a [][]string) []string {
		var out []string
		for _, x := range a {
			out = append(out, strings.Join(x, "\x00"))
		}
		sort.Strings(out)
		return out
	}
	if !slices.Equal(key(got), key(want)) {
		t.Fatalf("recorded execs differ from the script's: got %d, want %d\nmissing: %q\ninvented: %q", len(got), len(want),
			diff(key(want), key(got)), diff(key(got), key(want)))
	}
	if l := ofType(evs, record.TypeLoss); len(l) > 0 {
		t.Errorf("loss events: %+v", l)
	}
	exits := exitsByHostPid(t, evs)
	main := execs[0]
	if main.Pid == 0 || main.PPid != 1 || main.Cwd != "/workspace" || main.Path != "/bin/sh" {
		t.Errorf("the command's exec: %+v", main)
	}
	for _, e := range execs {
		x, ok := exits[e.HostPid]
		if !ok || x.Lost {
			t.Errorf("no exit for %q (host pid %d)", e.Argv, e.HostPid)
			continue
		}
		if x.Pid != e.Pid {
			t.Errorf("exit of %q: pid %d, exec had %d", e.Argv, x.Pid, e.Pid)
		}
		if strings.HasPrefix(strings.Join(e.Argv, " "), "/bin/true n=") {
			if e.PPid != main.Pid || e.Path != "/bin/true" || e.Cwd != "/workspace" {
				t.Errorf("loop exec: %+v (shell pid %d)", e, main.Pid)
			}
			if x.Code == nil || *x.Code != 0 || x.DurationMS == nil {
				t.Errorf("exit of %q: %+v", e.Argv, x)
			}
		}
	}
	if x := exits[main.HostPid]; x.Code == nil || *x.Code != 3 {
		t.Errorf("the shell's exit: %+v", x)
	}
	// A failed exec is recorded as failed: the shell tries a file that
	// is not executable, then goes on.
	_, evs = recorded(t, opts{}, nil, `printf 'x' > /tmp/noexec; /tmp/noexec 2>/dev/null; /bin/true after`)
	var failed, after bool
	for _, e := range ofType(evs, record.TypeExec) {
		if e.Path == "/tmp/noexec" {
			failed = e.Result == record.ResultFailed
		}
		if slices.Equal(e.Argv, []string{"/bin/true", "after"}) {
			after = e.Result == record.ResultOK
		}
	}
	if !failed || !after {
		t.Errorf("failed exec not recorded as failed (%v) or its control (%v): %+v", failed, after, ofType(evs, record.TypeExec))
	}
}

func diff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if i, ok := slices.BinarySearch(b, x); !ok {
			out = append(out, x)
		} else {
			b = slices.Delete(slices.Clone(b), i, i+1)
		}
	}
	if len(out) > 10 {
		out = append(out[:10], "...")
	}
	return out
}

// TestRecordHiding: tricks from inside that would hide what ran from a
// record kept inside, or from ps: exec of a memfd through
// /proc/self/fd/N and through fexecve, and a process that rewrites its
// own argv. The record shows the truth; the controls show each trick ran.
func TestRecordHiding(t *testing.T) {
	needRoot(t)
	script := `cat > /tmp/h.py <<'PYEOF'
import os, sys
fd = os.memfd_create("innocent", 0)
os.write(fd, open("/bin/echo", "rb").read())
pid = os.fork()
if pid == 0:
    os.execv("/proc/self/fd/%d" % fd, ["hidden-one", "memfd-path-ran"])
os.waitpid(pid, 0)
pid = os.fork()
if pid == 0:
    os.execve(fd, ["hidden-two", "fexecve-ran"], {})
os.waitpid(pid, 0)
PYEOF
python3 /tmp/h.py
perl -e '$0 = "innocent-name"; open(F, "/proc/self/cmdline"); my $c = <F>; $c =~ s/\0/ /g; print "cmdline: $c\n"; system("/bin/true", "child-of-rewritten")'`
	r, evs := recorded(t, opts{}, nil, script)
	mustOK(t, r, "hiding tricks")
	for _, want := range []string{"memfd-path-ran", "fexecve-ran", "cmdline: innocent-name"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("control: the trick did not work (%q missing):\n%s", want, r)
		}
	}
	var viaPath, viaFD, perl, child bool
	for _, e := range ofType(evs, record.TypeExec) {
		switch {
		case slices.Equal(e.Argv, []string{"hidden-one", "memfd-path-ran"}):
			viaPath = e.Syscall == "execve" && strings.HasPrefix(e.Path, "/proc/self/fd/") &&
				strings.HasPrefix(e.PathTarget, "/memfd:innocent") && e.Result == record.ResultOK
			if !viaPath {
				t.Errorf("memfd via /proc/self/fd: %+v", e)
			}
		case slices.Equal(e.Argv, []string{"hidden-two", "fexecve-ran"}):
			viaFD = e.Syscall == "execveat" && e.Path == "" && strings.HasPrefix(e.PathTarget, "/memfd:innocent") && e.Result == record.ResultOK
			if !viaFD {
				t.Errorf("fexecve: %+v", e)
			}
		case len(e.Argv) == 3 && e.Argv[0] == "perl" && e.Argv[1] == "-e" && strings.HasPrefix(e.Argv[2], `$0 = "innocent-name"`):
			perl = true
		case slices.Equal(e.Argv, []string{"/bin/true", "child-of-rewritten"}):
			child = e.Result == record.ResultOK
		}
		if len(e.Argv) > 0 && e.Argv[0] == "innocent-name" {
			t.Errorf("the record took the rewritten argv: %+v", e)
		}
	}
	if !viaPath || !viaFD || !perl || !child {
		t.Errorf("missing from the record: memfd path %v, fexecve %v, perl's true argv %v, its child %v\n%+v", viaPath, viaFD, perl, child, ofType(evs, record.TypeExec))
	}
}

// TestRecordForkBomb: a fast burst of forks and execs within the pids
// limit. Every exec is in the record (the listener makes each one wait),
// and every exit is too, or a loss event says the connector dropped some.
// The run completes.
func TestRecordForkBomb(t *testing.T) {
	needRoot(t)
	const n = 300
	r, evs := recorded(t, opts{}, []string{"--pids", "900"}, fmt.Sprintf(`i=0
while [ $i -lt %d ]; do /bin/true "fb$i" & ( : ) & i=$((i+1)); done
wait; echo done`, n))
	mustOK(t, r, "fork burst")
	if !strings.Contains(r.stdout, "done") {
		t.Fatalf("the burst did not complete:\n%s", r)
	}
	seen := map[string]bool{}
	loss := len(ofType(evs, record.TypeLoss)) > 0
	exits := exitsByHostPid(t, evs)
	for _, e := range ofType(evs, record.TypeExec) {
		if len(e.Argv) == 2 && strings.HasPrefix(e.Argv[1], "fb") {
			if seen[e.Argv[1]] {
				t.Errorf("exec %q recorded twice", e.Argv)
			}
			seen[e.Argv[1]] = true
			if e.Result != record.ResultOK && !(loss && e.Result == record.ResultUnconfirmed) {
				t.Errorf("exec %q: result %q (loss reported: %v)", e.Argv, e.Result, loss)
			}
			if x, ok := exits[e.HostPid]; !ok || (x.Lost && !loss) {
				t.Errorf("exit of %q missing or lost without a loss event: %+v", e.Argv, x)
			}
		}
	}
	if len(seen) != n {
		t.Errorf("recorded %d of the %d execs", len(seen), n)
	}
	// The subshells ran no exec: each is a process of the sandbox with an
	// exit of its own (or lost, with a loss event).
	clean := 0
	for _, x := range exits {
		if x.Exited && x.Code != nil && *x.Code == 0 {
			clean++
		}
	}
	if clean < 2*n && !loss {
		t.Errorf("%d clean exits for %d execs and %d subshells, and no loss event", clean, n, n)
	}
	t.Logf("%d events, loss events: %d", len(evs), len(ofType(evs, record.TypeLoss)))
}

// TestRecordOutsideView: the record file is neither visible nor writable
// inside; a record path the sandbox can see (the workspace, through a
// symlink to it, a read-only path, a bind, the host's system
// directories) is refused before anything runs.
func TestRecordOutsideView(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	file := filepath.Join(dir, "rec.jsonl")
	r := sh(t, opts{}, []string{"--record", file, "--workspace", ws}, fmt.Sprintf(`
test -e %[1]s && echo VISIBLE
echo forged >> %[1]s 2>/dev/null && echo WROTE
echo ran`, file))
	mustOK(t, r, "record outside")
	if !strings.Contains(r.stdout, "ran") || strings.Contains(r.stdout, "VISIBLE") || strings.Contains(r.stdout, "WROTE") {
		t.Errorf("record file seen from inside:\n%s", r)
	}
	b, _ := os.ReadFile(file)
	if evs, err := record.Read(strings.NewReader(string(b))); err != nil || len(evs) < 2 || evs[len(evs)-1].Type != record.TypeEnd {
		t.Errorf("record file (%v): %s", err, b)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(ws, link)
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o755)
	for _, c := range []struct {
		name  string
		flags []string
	}{
		{"workspace", []string{"--workspace", ws, "--record", filepath.Join(ws, "rec.jsonl")}},
		{"symlink to the workspace", []string{"--workspace", ws, "--record", filepath.Join(link, "rec.jsonl")}},
		{"read-only path", []string{"--ro", ro, "--record", filepath.Join(ro, "rec.jsonl")}},
		{"bind", []string{"--bind", ro + ":/data", "--record", filepath.Join(ro, "sub.jsonl")}},
		{"host system directory", []string{"--record", "/usr/local/rec.jsonl"}},
	} {
		r := sh(t, opts{}, c.flags, "echo RAN")
		if r.code != 125 || strings.Contains(r.stdout, "RAN") || !strings.Contains(r.stderr, "record") || !strings.Contains(r.stderr, "sandbox can see") {
			t.Errorf("%s: want a refusal (exit 125) naming the record:\n%s", c.name, r)
		}
	}
	for _, p := range []string{filepath.Join(ws, "rec.jsonl"), filepath.Join(ro, "rec.jsonl"), filepath.Join(ro, "sub.jsonl"), "/usr/local/rec.jsonl"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("a refused record left %s", p)
		}
	}
}

// TestRecordNet: an allowed and a denied request through the gateway are
// net events of the record, next to the curl execs that made them.
func TestRecordNet(t *testing.T) {
	needRoot(t)
	w := newEgressWorld(t)
	r, evs := recorded(t, opts{}, w.flags("--net-allow", "api.test", "--net-allow", "127.0.0.1"), fmt.Sprintf(`
curl -s -m 10 http://api.test:%[1]s/yes; echo
curl -s -m 10 -o /dev/null -w '%%{http_code}\n' http://other.test:%[1]s/no`, w.httpPort))
	mustOK(t, r, "net run")
	if !strings.Contains(r.stdout, "hello api.test") || !strings.Contains(r.stdout, "403") {
		t.Fatalf("controls: %s", r)
	}
	var allowed, denied bool
	for _, e := range ofType(evs, record.TypeNet) {
		if e.Allowed == nil {
			t.Errorf("net event without allowed: %+v", e)
			continue
		}
		switch {
		case e.Host == "api.test" && *e.Allowed && e.URLPath == "/yes" && e.BytesDown > 0:
			allowed = true
		case e.Host == "other.test" && !*e.Allowed && e.Rule != "":
			denied = true
		default:
			t.Errorf("unexpected net event: %+v", e)
		}
	}
	curls := 0
	for _, e := range ofType(evs, record.TypeExec) {
		if len(e.Argv) > 0 && e.Argv[0] == "curl" {
			curls++
		}
	}
	if !allowed || !denied || curls != 2 {
		t.Errorf("allowed %v, denied %v, curl execs %d; net events: %+v", allowed, denied, curls, ofType(evs, record.TypeNet))
	}
}

// TestRecordUsage: a 3 s run has usage samples (CPU, memory, pids) from
// its cgroup, one a second plus a last one.
func TestRecordUsage(t *testing.T) {
	needRoot(t)
	r, evs := recorded(t, opts{}, nil, `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 3`)
	mustOK(t, r, "usage run")
	us := ofType(evs, record.TypeUsage)
	if len(us) < 3 {
		t.Fatalf("%d usage samples for a run of %s", len(us), r.dur)
	}
	last := us[len(us)-1]
	if last.CPUNs == nil || *last.CPUNs == 0 || last.MemoryBytes == nil || *last.MemoryBytes == 0 || last.Pids == nil || *last.Pids == 0 || last.MemoryPeak == nil {
		t.Errorf("last sample: %+v", last)
	}
	for i := 1; i < len(us); i++ {
		if us[i].CPUNs == nil || us[i-1].CPUNs == nil || *us[i].CPUNs < *us[i-1].CPUNs {
			t.Errorf("CPU time not monotonic: %+v then %+v", us[i-1], us[i])
		}
	}
}

// TestRecordFailClosed: where the record cannot be kept, nothing runs
// (exit 125, naming the reason): rootless, the gvisor runtime, and
// without cgroups. Control: the same run as root records.
func TestRecordFailClosed(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	for _, c := range []struct {
		name  string
		o     opts
		flags []string
		want  string
	}{
		{"rootless", opts{nobody: true}, nil, "needs root"},
		{"gvisor", opts{}, []string{"--runtime", "gvisor"}, "gvisor"},
		{"no cgroups", opts{}, []string{"--insecure-no-cgroups"}, "cgroups"},
	} {
		file := filepath.Join(dir, c.name+".jsonl")
		r := sh(t, c.o, append([]string{"--record", file}, c.flags...), "echo RAN")
		if r.code != 125 || strings.Contains(r.stdout, "RAN") || !strings.Contains(r.stderr, "record") || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: want exit 125 naming the record and %q:\n%s", c.name, c.want, r)
		}
		if _, err := os.Stat(file); err == nil {
			t.Errorf("%s: a refused record left its file", c.name)
		}
	}
	_, evs := recorded(t, opts{}, nil, "echo RAN")
	if len(ofType(evs, record.TypeExec)) != 1 {
		t.Errorf("control: %+v", evs)
	}
}

// TestPolicySuggest: a policy suggested from a record allows the same
// workload when rerun, and refuses what the recording never reached (and
// what was denied in it).
func TestPolicySuggest(t *testing.T) {
	needRoot(t)
	w := newEgressWorld(t)
	file := filepath.Join(t.TempDir(), "rec.jsonl")
	workload := fmt.Sprintf(`curl -s -m 10 http://api.test:%[1]s/work; echo
curl -s -m 10 -o /dev/null -w 'other %%{http_code}\n' http://other.test:%[1]s/`, w.httpPort)
	r := sh(t, opts{}, w.flags("--record", file, "--net-allow", "api.test", "--net-allow", "127.0.0.1"), workload)
	mustOK(t, r, "recorded run")
	if !strings.Contains(r.stdout, "hello api.test") || !strings.Contains(r.stdout, "other 403") {
		t.Fatalf("recorded run: %s", r)
	}
	out := airlock(t, opts{}, "policy", "suggest", "--from", file)
	mustOK(t, out, "policy suggest")
	pol := out.stdout
	for _, want := range []string{"mode: allowlist", `"api.test:` + w.httpPort + `"`, `"127.0.0.1:` + w.httpPort + `"`, "other.test:" + w.httpPort + " (1x", "memory:", "pids:", "/usr/bin/curl"} {
		if !strings.Contains(pol, want) {
			t.Errorf("suggestion lacks %q:\n%s", want, pol)
		}
	}
	pf := filepath.Join(t.TempDir(), "suggested.yaml")
	os.WriteFile(pf, []byte(pol), 0o644)
	// The same workload under the suggestion alone (plus the test's host
	// map and workspace, which are flags and not in a record).
	r = sh(t, opts{}, w.flags("--policy", pf), workload+fmt.Sprintf(`
curl -s -m 10 -o /dev/null -w 'never %%{http_code}\n' http://example.com:%[1]s/`, w.httpPort))
	mustOK(t, r, "rerun under the suggestion")
	for _, want := range []string{"hello api.test:" + w.httpPort + " /work", "other 403", "never 403"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("rerun: %q missing:\n%s", want, r)
		}
	}
	// Bad input: a file that is not a record.
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("hello\n"), 0o644)
	if r := airlock(t, opts{}, "policy", "suggest", "--from", bad); r.code == 0 || !strings.Contains(r.stderr, "line 1") {
		t.Errorf("not a record: %s", r)
	}
	if r := airlock(t, opts{}, "policy", "suggest", "--from", filepath.Join(t.TempDir(), "missing")); r.code == 0 || r.stdout != "" {
		t.Errorf("missing record: %s", r)
	}
}

// TestRecordOffByDefault: without --record the sandbox's processes have
// the policy's filter only; with it, the exec notify filter too.
func TestRecordOffByDefault(t *testing.T) {
	needRoot(t)
	r := sh(t, opts{}, nil, `grep Seccomp_filters /proc/self/status`)
	mustOK(t, r, "plain run")
	if strings.TrimSpace(r.stdout) != "Seccomp_filters:\t1" {
		t.Errorf("without --record: %q", r.stdout)
	}
	file := filepath.Join(t.TempDir(), "rec.jsonl")
	r = sh(t, opts{}, []string{"--record", file}, `grep Seccomp_filters /proc/self/status`)
	mustOK(t, r, "recorded run")
	if strings.TrimSpace(r.stdout) != "Seccomp_filters:\t2" {
		t.Errorf("with --record: %q", r.stdout)
	}
}
