package seccomp

import (
	"fmt"
	"runtime"
)

// retUserNotif is SECCOMP_RET_USER_NOTIF: the calling thread waits while
// the holder of the filter's listener descriptor looks at the call, then
// answers it (linux/seccomp.h).
const retUserNotif = 0x7fc00000

// ExecNotifyFilter returns the filter that `airlock run --record` adds in
// the sandbox's init: execve and execveat of the native ABI go to the
// listener (SECCOMP_RET_USER_NOTIF); every other call of the native ABI is
// allowed (the policy's own filter decides those); another ABI (x32 or a
// foreign AUDIT_ARCH, whose exec would carry 32-bit pointers) kills the
// process, so that no exec reaches the kernel unseen.
func ExecNotifyFilter() ([]SockFilter, error) {
	a, err := archFor(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	return execNotifyFor(a)
}

func execNotifyFor(a *archInfo) ([]SockFilter, error) {
	tab := a.syscalls()
	execve, ok1 := tab["execve"]
	execveat, ok2 := tab["execveat"]
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("seccomp: no execve/execveat in the %s table", a.name)
	}
	kill := stmt(opRetK, retKillProcess)
	prog := []SockFilter{
		stmt(opLdAbsW, offArch),
		jump(opJeqK, a.auditArch, 1, 0),
		kill,
		stmt(opLdAbsW, offNr),
	}
	if a.x32Bit {
		prog = append(prog,
			jump(opJgeK, x32SyscallBit, 0, 2),
			jump(opJeqK, 0xffffffff, 1, 0),
			kill,
		)
	}
	prog = append(prog,
		jump(opJeqK, uint32(execve), 2, 0),
		jump(opJeqK, uint32(execveat), 1, 0),
		stmt(opRetK, retAllow),
		stmt(opRetK, retUserNotif),
	)
	return prog, nil
}
