package gvisor

import (
	"os"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// sandboxProcess is the OCI process of a command: root inside with no
// capabilities and no_new_privs (as in the native runtime, where root
// inside has every capability dropped).
func sandboxProcess(args, env []string, cwd string, rl []specs.POSIXRlimit) *specs.Process {
	return &specs.Process{
		Args:            args,
		Env:             env,
		Cwd:             cwd,
		NoNewPrivileges: true,
		Capabilities:    &specs.LinuxCapabilities{},
		Rlimits:         rl,
	}
}

// openPTY allocates a pseudo-terminal from the host's devpts for a command
// started with a TTY; runsc exec passes the replica in as the terminal.
func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	master = os.NewFile(uintptr(mfd), "ptmx")
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	if rows > 0 && cols > 0 {
		unix.IoctlSetWinsize(mfd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}
	sfd, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, os.NewFile(uintptr(sfd), "pts"), nil
}
