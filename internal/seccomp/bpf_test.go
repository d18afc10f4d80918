package seccomp

import (
	"encoding/binary"
	"fmt"
	"sort"
	"testing"

	"golang.org/x/net/bpf"
)

// Test helpers: a strict seccomp-BPF interpreter, the kernel's static
// checks, and a cross-check of every run against golang.org/x/net/bpf's VM.

const (
	wantAllow  = retAllow
	wantEPERM  = retErrno | errnoEPERM
	wantENOSYS = retErrno | errnoENOSYS
	wantKill   = retKillProcess

	auditArchI386 = 0x40000003
	auditArchARM  = 0x40000028
)

func actionName(v uint32) string {
	if n := retName(v); n != "" {
		return n
	}
	return fmt.Sprintf("%#x", v)
}

// seccompData is struct seccomp_data.
type seccompData struct {
	nr   int32
	arch uint32
	ip   uint64
	args [6]uint64
}

// bytes encodes d as the kernel does on a little-endian machine. With
// wordsBE every 32-bit word is stored big-endian instead, which is what
// x/net/bpf's VM (made for network packets) expects for its 4-byte loads.
func (d seccompData) bytes(wordsBE bool) []byte {
	var w [16]uint32
	w[0] = uint32(d.nr)
	w[1] = d.arch
	w[2], w[3] = uint32(d.ip), uint32(d.ip>>32)
	for i, a := range d.args {
		w[4+2*i], w[5+2*i] = uint32(a), uint32(a>>32)
	}
	b := make([]byte, 64)
	for i, v := range w {
		if wordsBE {
			binary.BigEndian.PutUint32(b[4*i:], v)
		} else {
			binary.LittleEndian.PutUint32(b[4*i:], v)
		}
	}
	return b
}

// checkProg applies the kernel's static checks (bpf_check_classic and
// seccomp_check_filter) for the instructions the compiler may emit and
// rejects everything else.
func checkProg(prog []SockFilter) error {
	if len(prog) == 0 || len(prog) > MaxInstructions {
		return fmt.Errorf("bad length %d", len(prog))
	}
	n := uint64(len(prog))
	for i, ins := range prog {
		next := uint64(i) + 1
		switch ins.Code {
		case opLdAbsW:
			if ins.K >= 64 || ins.K%4 != 0 {
				return fmt.Errorf("%d: load of seccomp_data offset %d", i, ins.K)
			}
		case opJeqK, opJgeK, opJgtK, opJsetK:
			if next+uint64(ins.Jt) >= n || next+uint64(ins.Jf) >= n {
				return fmt.Errorf("%d: jump out of program", i)
			}
		case opJa:
			if next+uint64(ins.K) >= n {
				return fmt.Errorf("%d: ja out of program", i)
			}
		case opAndK, opRetK:
		default:
			return fmt.Errorf("%d: unexpected opcode %#x", i, ins.Code)
		}
	}
	if prog[len(prog)-1].Code != opRetK {
		return fmt.Errorf("last instruction is not ret")
	}
	return nil
}

// interpret runs prog on d (prog must pass checkProg).
func interpret(prog []SockFilter, d seccompData) (uint32, error) {
	mem := d.bytes(false)
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		ins := prog[pc]
		cond := func(ok bool) {
			if ok {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		}
		switch ins.Code {
		case opLdAbsW:
			a = binary.LittleEndian.Uint32(mem[ins.K:])
		case opAndK:
			a &= ins.K
		case opJeqK:
			cond(a == ins.K)
		case opJgeK:
			cond(a >= ins.K)
		case opJgtK:
			cond(a > ins.K)
		case opJsetK:
			cond(a&ins.K != 0)
		case opJa:
			pc += int(ins.K)
		case opRetK:
			return ins.K, nil
		default:
			return 0, fmt.Errorf("%d: unexpected opcode %#x", pc, ins.Code)
		}
	}
	return 0, fmt.Errorf("fell off the end")
}

// filter is a compiled program under test for one ABI.
type filter struct {
	arch *archInfo
	prog []SockFilter
	vm   *bpf.VM
}

func newFilter(t testing.TB, a *archInfo, prog []SockFilter) *filter {
	t.Helper()
	if err := checkProg(prog); err != nil {
		t.Fatalf("program fails the kernel's checks: %v", err)
	}
	raw := make([]bpf.Instruction, len(prog))
	for i, in := range prog {
		raw[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}.Disassemble()
	}
	vm, err := bpf.NewVM(raw)
	if err != nil {
		t.Fatalf("x/net/bpf rejects the program: %v", err)
	}
	return &filter{arch: a, prog: prog, vm: vm}
}

func compileFilter(t testing.TB, p *Profile, a *archInfo) *filter {
	t.Helper()
	prog, err := p.compileFor(a)
	if err != nil {
		t.Fatalf("compile for %s: %v", a.name, err)
	}
	return newFilter(t, a, prog)
}

// runData returns the action for d, checked against x/net/bpf's VM.
func (f *filter) runData(t testing.TB, d seccompData) uint32 {
	t.Helper()
	got, err := interpret(f.prog, d)
	if err != nil {
		t.Fatalf("interpret %+v: %v", d, err)
	}
	vmGot, err := f.vm.Run(d.bytes(true))
	if err != nil {
		t.Fatalf("x/net/bpf VM on %+v: %v", d, err)
	}
	if uint32(vmGot) != got {
		t.Fatalf("interpreters disagree on %+v: ours %#x, x/net/bpf %#x", d, got, vmGot)
	}
	return got
}

// nr runs syscall number nr with args on f's native ABI.
func (f *filter) nr(t testing.TB, nr int32, args ...uint64) uint32 {
	t.Helper()
	d := seccompData{nr: nr, arch: f.arch.auditArch, ip: 0x7fff12345678}
	copy(d.args[:], args)
	return f.runData(t, d)
}

// sys runs the named syscall with args.
func (f *filter) sys(t testing.TB, name string, args ...uint64) uint32 {
	t.Helper()
	nr, ok := f.arch.syscalls()[name]
	if !ok {
		t.Fatalf("no syscall %q on %s", name, f.arch.name)
	}
	return f.nr(t, int32(nr), args...)
}

// expect asserts the action of the named syscall with args.
func (f *filter) expect(t testing.TB, want uint32, name string, args ...uint64) {
	t.Helper()
	if got := f.sys(t, name, args...); got != want {
		t.Errorf("%s: %s%#x = %s, want %s", f.arch.name, name, args, actionName(got), actionName(want))
	}
}

func TestInterpreterAgreesWithKernelEncoding(t *testing.T) {
	// A hand-written program whose outcome depends on the byte order of
	// every field: a broken encoder or interpreter cannot pass.
	prog := []SockFilter{
		{Code: opLdAbsW, K: offArch},
		{Code: opJeqK, K: auditArchX86_64, Jt: 0, Jf: 5},
		{Code: opLdAbsW, K: offArgs + 4}, // args[0].hi
		{Code: opJeqK, K: 0x11223344, Jt: 0, Jf: 3},
		{Code: opLdAbsW, K: offArgs}, // args[0].lo
		{Code: opAndK, K: 0xff00},
		{Code: opJeqK, K: 0x7700, Jt: 1, Jf: 0},
		{Code: opRetK, K: wantEPERM},
		{Code: opRetK, K: wantAllow},
	}
	f := newFilter(t, archs(t)["amd64"], prog)
	if got := f.nr(t, 0, 0x1122334455667788); got != wantAllow {
		t.Errorf("matching args: %s, want ALLOW", actionName(got))
	}
	if got := f.nr(t, 0, 0x4433221155667788); got != wantEPERM {
		t.Errorf("swapped high word: %s, want EPERM", actionName(got))
	}
	if got := f.nr(t, 0, 0x1122334455660088); got != wantEPERM {
		t.Errorf("wrong low word: %s, want EPERM", actionName(got))
	}
	if err := checkProg(append(prog[:8:8], SockFilter{Code: opJa, K: 5})); err == nil {
		t.Error("checkProg accepts a jump out of the program")
	}
}

func archs(t testing.TB) map[string]*archInfo {
	t.Helper()
	m := map[string]*archInfo{}
	for _, g := range []string{"amd64", "arm64"} {
		a, err := archFor(g)
		if err != nil {
			t.Fatal(err)
		}
		m[g] = a
	}
	return m
}

// sortedNames returns the keys of a table in syscall-number order.
func (a *archInfo) sortedNames() []string {
	names := make([]string, 0, len(a.syscalls()))
	for n := range a.syscalls() {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return a.syscalls()[names[i]] < a.syscalls()[names[j]] })
	return names
}
