package native

import (
	"fmt"
	"os"
	"sync"

	"github.com/airlock-dev/airlock/internal/initbin"
	"github.com/airlock-dev/airlock/internal/progfile"
)

// initProgram says which program a sandbox's init (and reaper) runs, and the
// environment it needs.
//
// An explicit Runtime.Exe wins. Otherwise, when the airlock binary carries
// the small init program (internal/initbin, `make build`), that program runs,
// as root, from root's read-only copy of it (cachedInit), else from a sealed
// memfd made once per process: nothing a sandbox could overwrite through
// /proc/1/exe (F_SEAL_WRITE, or a file of host root's that nobody may
// write), and none of the daemon's dependencies initialising in every
// sandbox. Without it (a plain `go build`), airlock re-executes itself.
func (r *Runtime) initProgram() (exe string, env []string) {
	if r.Exe != "" {
		return r.Exe, nil
	}
	if f, err := embeddedInit(); err == nil && f != nil {
		return fmt.Sprintf("/proc/self/fd/%d", f.Fd()), []string{initbin.BuildEnv + "=" + initbin.BuildID}
	}
	return "/proc/self/exe", nil
}

// embeddedInit makes the embedded init program executable (progfile.Open:
// root's copy in initCacheDir, or a sealed memfd), once per process. It
// returns nil when there is none, or an error when the host forbids
// executable memfds (vm.memfd_noexec=2): airlock then re-executes itself,
// which is slower but the same sandbox.
var embeddedInit = sync.OnceValues(func() (*os.File, error) {
	bin := initbin.Bin()
	if len(bin) == 0 {
		return nil, nil
	}
	return progfile.Open(initCacheDir, "airlock-init", initbin.BuildID, bin)
})

// initCacheDir holds, as root, one copy of each build's init program.
const initCacheDir = "/run/airlock/init"
