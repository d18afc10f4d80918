// Package seccomp owns airlock's seccomp-BPF layer: the syscall tables, the
// default allowlist profile, the compiler from a Profile to a classic BPF
// program, the installer, and a disassembler used for golden files.
//
// The model is an allowlist. Every syscall the profile does not allow fails
// with EPERM; the syscalls in the package's forbidden set (ptrace, bpf,
// mount, unshare, keyctl, io_uring, ...) can never be allowed by any
// Profile, and clone, socket, socketpair, ioctl and personality are allowed
// only for argument values that cannot escape the sandbox.
//
// Rules for anyone changing this package:
//
//   - Never silently drop a rule. An unknown syscall name, a name that is
//     both allowed and denied, a forbidden syscall in the allowlist, an
//     impossible argument condition or a program that does not fit in the
//     kernel's 4096-instruction limit is an error from Compile, never a
//     skipped entry.
//   - Never widen a profile behind the caller's back: Deny only removes
//     permissions; nothing in this package adds any.
//   - Every program first checks seccomp_data.arch (and on x86-64 the x32
//     bit) and kills the process on a foreign ABI, because syscall numbers
//     are only meaningful for one ABI.
//   - Arguments that the kernel truncates to 32 bits (int / unsigned int
//     parameters such as the ioctl request) are compared on their low 32
//     bits only, so garbage in the high half cannot dodge a deny rule.
//     64-bit parameters compare both halves.
//
// The tables for amd64 and arm64 are compiled into every build (they are
// plain data, see gen_tables.go) so that both can be tested anywhere; Lookup
// and Compile use the table of the running architecture only.
package seccomp

import (
	"fmt"
	"runtime"
	"sync"
)

// archInfo describes one supported syscall ABI.
type archInfo struct {
	goarch    string
	name      string // human name used in messages and the disassembly
	auditArch uint32 // seccomp_data.arch value (AUDIT_ARCH_*)
	x32Bit    bool   // numbers with bit 30 set belong to another ABI (x32)
	// tableFn builds the name -> number table; syscalls() builds it once,
	// on first use, so that processes that never compile a profile (the
	// sandbox's init) do not pay for it at start-up.
	tableFn   func() map[string]int
	tableOnce sync.Once
	table     map[string]int

	once  sync.Once
	names map[int]string
}

// x32SyscallBit is __X32_SYSCALL_BIT: x32 syscalls share AUDIT_ARCH_X86_64
// and differ only by this bit in the number.
const x32SyscallBit = 0x40000000

// AUDIT_ARCH_* values (linux/audit.h).
const (
	auditArchX86_64  = 0xc000003e
	auditArchAArch64 = 0xc00000b7
)

var arches = []*archInfo{
	{goarch: "amd64", name: "x86_64", auditArch: auditArchX86_64, x32Bit: true, tableFn: x86_64Syscalls},
	{goarch: "arm64", name: "aarch64", auditArch: auditArchAArch64, tableFn: aarch64Syscalls},
}

// archFor returns the ABI description for a GOARCH.
func archFor(goarch string) (*archInfo, error) {
	for _, a := range arches {
		if a.goarch == goarch {
			return a, nil
		}
	}
	return nil, fmt.Errorf("seccomp: architecture %s not supported", goarch)
}

// archByAudit returns the ABI whose AUDIT_ARCH value is v, or nil.
func archByAudit(v uint32) *archInfo {
	for _, a := range arches {
		if a.auditArch == v {
			return a
		}
	}
	return nil
}

// syscalls returns the name -> number table of a.
func (a *archInfo) syscalls() map[string]int {
	a.tableOnce.Do(func() { a.table = a.tableFn() })
	return a.table
}

// nameOf returns the syscall name of nr on a, or "".
func (a *archInfo) nameOf(nr int) string {
	a.once.Do(func() {
		a.names = make(map[int]string, len(a.syscalls()))
		for n, v := range a.syscalls() {
			a.names[v] = n
		}
	})
	return a.names[nr]
}

// knownAnywhere reports whether name is a syscall on any supported
// architecture.
func knownAnywhere(name string) bool {
	for _, a := range arches {
		if _, ok := a.syscalls()[name]; ok {
			return true
		}
	}
	return false
}

// Lookup returns the syscall number of name on the running architecture.
// On an unsupported architecture it always returns false.
func Lookup(name string) (nr int, ok bool) {
	a, err := archFor(runtime.GOARCH)
	if err != nil {
		return 0, false
	}
	nr, ok = a.syscalls()[name]
	return nr, ok
}
