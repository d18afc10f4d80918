package native

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/initbin"
)

// initProgram says which program a sandbox's init (and reaper) runs, and the
// environment it needs.
//
// An explicit Runtime.Exe wins. Otherwise, when the airlock binary carries
// the small init program (internal/initbin, `make build`), that program runs
// from a sealed memfd made once per process: nothing on the host's
// filesystem, nothing a sandbox could overwrite through /proc/1/exe
// (F_SEAL_WRITE), and none of the daemon's dependencies initialising in every
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

// embeddedInit writes the embedded init program into a sealed, executable
// memfd, once per process. It returns nil when there is none, or when the
// host forbids executable memfds (vm.memfd_noexec=2): airlock then
// re-executes itself, which is slower but the same sandbox.
var embeddedInit = sync.OnceValues(func() (*os.File, error) {
	bin := initbin.Bin()
	if len(bin) == 0 {
		return nil, nil
	}
	flags := unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	fd, err := unix.MemfdCreate("airlock-init", flags|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // kernels before 6.3 know no MFD_EXEC
		fd, err = unix.MemfdCreate("airlock-init", flags)
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "airlock-init")
	if _, err := f.Write(bin); err != nil {
		f.Close()
		return nil, err
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
})
