package seccomp

import "testing"

// The record's filter: execve and execveat go to the listener, anything
// else of the native ABI is left to the policy's filter, and another ABI
// (x32, a foreign AUDIT_ARCH) is killed so no exec passes unseen.
func TestExecNotifyFilter(t *testing.T) {
	for _, a := range arches {
		prog, err := execNotifyFor(a)
		if err != nil {
			t.Fatal(err)
		}
		f := newFilter(t, a, prog)
		f.expect(t, retUserNotif, "execve")
		f.expect(t, retUserNotif, "execveat", 3, 0, 0, 0, 0x1000)
		for _, name := range []string{"read", "openat", "clone", "seccomp"} {
			f.expect(t, wantAllow, name)
		}
		if got := f.runData(t, seccompData{nr: int32(a.syscalls()["execve"]), arch: auditArchI386}); got != wantKill {
			t.Errorf("%s: foreign arch: %s", a.name, actionName(got))
		}
		if a.x32Bit {
			if got := f.nr(t, x32SyscallBit|520); got != wantKill { // x32 execve
				t.Errorf("x32 execve: %s", actionName(got))
			}
			if got := f.nr(t, -1); got != wantAllow {
				t.Errorf("-1: %s", actionName(got))
			}
		}
	}
}
