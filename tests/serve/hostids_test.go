//go:build linux

package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/store"
)

// A pool of its own (three ranges), so that no other test takes them.
const hostIDPoolStart, hostIDPoolSlots = 0x68000000, 3

// hostIDs returns the host uid a sandbox's root maps to, from its uid_map.
func (d *daemon) hostIDs(t *testing.T, id string) int {
	t.Helper()
	f := strings.Fields(d.sh(t, id, "cat /proc/self/uid_map"))
	if len(f) != 3 || f[0] != "0" || f[2] != "65536" {
		t.Fatalf("%s: uid_map %q, want 0 UID 65536", id, f)
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

type leaseFile struct {
	Sandbox string `json:"sandbox"`
	Owner   int    `json:"owner"`
	Init    int    `json:"init"`
}

func readLease(t *testing.T, uid int) (leaseFile, bool) {
	t.Helper()
	var l leaseFile
	b, err := os.ReadFile(fmt.Sprintf("/run/airlock/uids/%d-%d", uid, uid))
	if os.IsNotExist(err) {
		return l, false
	}
	if err != nil || json.Unmarshal(b, &l) != nil {
		t.Fatalf("lease %d: %v %s", uid, err, b)
	}
	return l, true
}

// storedIDs reads a sandbox's host ids from the daemon's store (the
// daemon is stopped).
func storedIDs(t *testing.T, d *daemon, id string) (int, int) {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(d.dir, "data", "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := st.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r.HostUID, r.HostGID
}

// Each of the daemon's sandboxes runs as a host id range of its own,
// leased host-wide and recorded in the store. Across a restart (SIGKILL)
// the ranges stay leased while the sandboxes run: `airlock run` meanwhile
// gets another, the new daemon re-adopts each sandbox on the range the
// store recorded and holds its lease, a new sandbox gets the free one, and
// a destroyed sandbox's range is released.
func TestHostIDsAcrossRestart(t *testing.T) {
	d := startDaemon(t, fmt.Sprintf("uid_pool: {start: %d, size: %d}", hostIDPoolStart, hostIDPoolSlots*65536))
	a := d.create(t, nil)
	b := d.create(t, nil)
	ua, ub := d.hostIDs(t, a.ID), d.hostIDs(t, b.ID)
	inPool := func(u int) bool {
		return u >= hostIDPoolStart && u < hostIDPoolStart+hostIDPoolSlots*65536 && (u-hostIDPoolStart)%65536 == 0
	}
	if ua == ub || !inPool(ua) || !inPool(ub) {
		t.Fatalf("ranges %d and %d: want two different ranges of the pool", ua, ub)
	}
	for id, u := range map[string]int{a.ID: ua, b.ID: ub} {
		if l, ok := readLease(t, u); !ok || "sb-"+l.Sandbox != id {
			t.Fatalf("lease of %d: %+v (exists %v), want one for %s", u, l, ok, id)
		}
	}

	d.stop(syscall.SIGKILL)
	for id, u := range map[string]int{a.ID: ua, b.ID: ub} {
		if uid, gid := storedIDs(t, d, id); uid != u || gid != u {
			t.Errorf("store: %s runs as %d/%d, want %d", id, uid, gid, u)
		}
	}
	// No daemon, the sandboxes run on: their ranges are not handed out.
	pool := fmt.Sprintf("%d:%d", hostIDPoolStart, hostIDPoolSlots*65536)
	out, err := exec.Command(airlockBin, "run", "-v", "--uid-pool", pool, "--", "true").CombinedOutput()
	m := regexp.MustCompile(`host uids (\d+)-`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("airlock run while the daemon is down: %v\n%s", err, out)
	}
	if u, _ := strconv.Atoi(string(m[1])); u == ua || u == ub || !inPool(u) {
		t.Errorf("airlock run got range %d while the daemon's sandboxes hold %d and %d", u, ua, ub)
	}

	d.start()
	for id, u := range map[string]int{a.ID: ua, b.ID: ub} {
		if got := d.hostIDs(t, id); got != u {
			t.Errorf("%s after the restart runs as %d, want %d", id, got, u)
		}
		if l, ok := readLease(t, u); !ok || l.Owner != d.Pid() {
			t.Errorf("lease of %d after the restart: %+v (exists %v), want it held by the new daemon (pid %d)", u, l, ok, d.Pid())
		}
	}
	c := d.create(t, nil)
	if uc := d.hostIDs(t, c.ID); uc == ua || uc == ub {
		t.Errorf("a new sandbox got range %d, held by a re-adopted one", uc)
	}
	if err := d.c.DeleteSandbox(ctxT(t), a.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := readLease(t, ua); ok {
		t.Errorf("lease of %d still there after its sandbox was deleted", ua)
	}
	if _, ok := readLease(t, ub); !ok {
		t.Errorf("lease of %d (still running) gone", ub)
	}
}

// A sandbox whose runtime state names other host ids than the store
// recorded is not re-adopted (failed, removed from the host); the other
// one is (the control).
func TestHostIDsMismatchFailsClosed(t *testing.T) {
	d := startDaemon(t, fmt.Sprintf("uid_pool: {start: %d, size: %d}", hostIDPoolStart, hostIDPoolSlots*65536))
	a := d.create(t, nil)
	ok := d.create(t, nil)
	ua := d.hostIDs(t, a.ID)
	d.stop(syscall.SIGKILL)
	// The free third range of the pool, written into a's state file.
	other := hostIDPoolStart
	for u := hostIDPoolStart; u < hostIDPoolStart+hostIDPoolSlots*65536; u += 65536 {
		if _, held := readLease(t, u); !held {
			other = u
		}
	}
	path := filepath.Join(d.stateDir, strings.TrimPrefix(a.ID, "sb-"), "state.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.ReplaceAll(strings.ReplaceAll(string(b),
		fmt.Sprintf(`"host_uid":%d`, ua), fmt.Sprintf(`"host_uid":%d`, other)),
		fmt.Sprintf(`"host_gid":%d`, ua), fmt.Sprintf(`"host_gid":%d`, other)))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
	got, err := d.c.GetSandbox(ctxT(t), a.ID)
	if err != nil || got.State != api.StateFailed || !strings.Contains(got.Reason, "host ids") {
		t.Fatalf("sandbox with tampered host ids after the restart: %+v %v", got, err)
	}
	for _, e := range d.stateEntries() {
		if "sb-"+e == a.ID {
			t.Error("its state is still on the host")
		}
	}
	if got, err := d.c.GetSandbox(ctxT(t), ok.ID); err != nil || got.State != api.StateRunning {
		t.Fatalf("control sandbox after the restart: %+v %v", got, err)
	}
	d.sh(t, ok.ID, "true")
}

// A pool with one range holds one sandbox: the next creation is refused
// with 429 (resource exhausted) and leaves nothing behind, and succeeds
// once the first sandbox is gone.
func TestHostIDPoolExhausted(t *testing.T) {
	d := startDaemon(t, fmt.Sprintf("uid_pool: {start: %d, size: 65536}", hostIDPoolStart+hostIDPoolSlots*65536))
	a := d.create(t, nil)
	before := len(d.stateEntries())
	_, err := d.c.CreateSandbox(ctxT(t), &api.CreateSandboxRequest{})
	wantCode(t, "create on a full uid pool", err, 429)
	if !strings.Contains(err.Error(), "ranges are leased") {
		t.Errorf("the error does not say why: %v", err)
	}
	if n := len(d.stateEntries()); n != before {
		t.Errorf("the refused creation left state on the host (%d entries, %d before)", n, before)
	}
	if err := d.c.DeleteSandbox(ctxT(t), a.ID); err != nil {
		t.Fatal(err)
	}
	b := d.create(t, nil)
	if u := d.hostIDs(t, b.ID); u != hostIDPoolStart+hostIDPoolSlots*65536 {
		t.Errorf("sandbox on the freed pool runs as %d", u)
	}
}
