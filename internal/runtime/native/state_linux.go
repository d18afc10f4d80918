package native

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/cgroup"
)

// stateFile records, in a sandbox's state directory, what a later airlock
// must clean up if the supervisor that created the sandbox died (SIGKILL)
// before it could.
type stateFile struct {
	Owner        int      `json:"owner"`
	OwnerStart   string   `json:"owner_start"`
	Workspace    string   `json:"workspace"`
	Placeholders []string `json:"placeholders,omitempty"`
}

func writeState(dir, ws string, placeholders []string) error {
	st := stateFile{Owner: os.Getpid(), OwnerStart: procStart(os.Getpid()), Workspace: ws, Placeholders: placeholders}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "state.json"))
}

// procStart is the start time of pid (field 22 of /proc/pid/stat), which
// tells a live owner from a recycled pid.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// sweep removes the state of sandboxes whose supervisor is gone. A
// directory without a state file is removed once it is old enough that no
// sandbox can still be starting in it.
func sweep(root string) {
	if !sweepMu.TryLock() {
		return
	}
	defer sweepMu.Unlock()
	if os.Geteuid() == 0 {
		cgroup.Sweep("")
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Name() == "cache" {
			continue
		}
		dir := filepath.Join(root, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "state.json"))
		if err != nil {
			fi, err := e.Info()
			if err == nil && time.Since(fi.ModTime()) > 2*setupTimeout {
				os.RemoveAll(dir)
			}
			continue
		}
		var st stateFile
		if json.Unmarshal(b, &st) != nil {
			continue
		}
		if st.Owner > 0 && procStart(st.Owner) == st.OwnerStart {
			continue // owner alive
		}
		removePlaceholders(st.Workspace, st.Placeholders)
		os.RemoveAll(dir)
	}
}
