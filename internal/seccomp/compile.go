package seccomp

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
)

// MaxInstructions is the kernel's limit on a seccomp program (BPF_MAXINSNS).
const MaxInstructions = 4096

// Offsets into struct seccomp_data. Both supported ABIs are little-endian,
// so the low half of args[i] comes first.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// Classic BPF opcodes (linux/filter.h). The constants are spelled out
// rather than taken from x/sys/unix so that the compiler, a pure function,
// builds and gives the same output on every GOOS.
const (
	classLd  = 0x00
	classAlu = 0x04
	classJmp = 0x05
	classRet = 0x06
	classMsc = 0x07

	opLdAbsW = 0x20 // BPF_LD | BPF_W | BPF_ABS
	opJa     = 0x05 // BPF_JMP | BPF_JA
	opJeqK   = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	opJgtK   = 0x25 // BPF_JMP | BPF_JGT | BPF_K
	opJgeK   = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	opJsetK  = 0x45 // BPF_JMP | BPF_JSET | BPF_K
	opAndK   = 0x54 // BPF_ALU | BPF_AND | BPF_K
	opRetK   = 0x06 // BPF_RET | BPF_K
)

// Seccomp return values (linux/seccomp.h) and the errnos the profile uses
// (asm-generic/errno-base.h, errno.h; the same on amd64 and arm64).
const (
	retKillProcess = 0x80000000
	retKillThread  = 0x00000000
	retTrap        = 0x00030000
	retErrno       = 0x00050000
	retLog         = 0x7ffc0000
	retAllow       = 0x7fff0000
	retActionFull  = 0xffff0000
	retData        = 0x0000ffff

	errnoEPERM  = 1
	errnoENOSYS = 38
)

// defaultAction applies to every syscall the profile does not mention.
const defaultAction = ActionEPERM

func (a Action) ret() (uint32, error) {
	switch a {
	case ActionAllow:
		return retAllow, nil
	case ActionEPERM:
		return retErrno | errnoEPERM, nil
	case ActionENOSYS:
		return retErrno | errnoENOSYS, nil
	}
	return 0, fmt.Errorf("seccomp: unknown action %q", a)
}

func stmt(code uint16, k uint32) SockFilter { return SockFilter{Code: code, K: k} }

func jump(code uint16, k uint32, jt, jf uint8) SockFilter {
	return SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

// Compile turns the profile into a BPF program for the running
// architecture. It fails rather than drop or weaken anything it cannot
// express.
func (p *Profile) Compile() ([]SockFilter, error) {
	a, err := archFor(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	return p.compileFor(a)
}

// leaf is what happens to one syscall number: a fixed action or a rule.
type leaf struct {
	action Action
	rule   *Rule
}

// interval says that numbers from lo up to the next interval's lo get leaf.
type interval struct {
	lo   uint32
	leaf leaf
}

func (p *Profile) compileFor(a *archInfo) ([]SockFilter, error) {
	if p == nil {
		return nil, fmt.Errorf("seccomp: nil profile")
	}
	leaves, err := p.resolve(a)
	if err != nil {
		return nil, err
	}

	nrs := make([]int, 0, len(leaves))
	for nr := range leaves {
		nrs = append(nrs, nr)
	}
	sort.Ints(nrs)
	var ivs []interval
	push := func(lo uint32, l leaf) {
		if n := len(ivs); n > 0 && l.rule == nil && ivs[n-1].leaf.rule == nil && ivs[n-1].leaf.action == l.action {
			return // same fixed action as the numbers just below: extend
		}
		ivs = append(ivs, interval{lo, l})
	}
	next := uint64(0)
	for _, nr := range nrs {
		if uint64(nr) > next {
			push(uint32(next), leaf{action: defaultAction})
		}
		push(uint32(nr), leaves[nr])
		next = uint64(nr) + 1
	}
	if next <= 0xffffffff {
		push(uint32(next), leaf{action: defaultAction})
	}

	kill := stmt(opRetK, retKillProcess)
	prog := []SockFilter{
		stmt(opLdAbsW, offArch),
		jump(opJeqK, a.auditArch, 1, 0),
		kill,
		stmt(opLdAbsW, offNr),
	}
	if a.x32Bit {
		// Numbers with the x32 bit belong to another ABI: kill. -1 is let
		// through (it is how tracers skip a syscall) and gets the default.
		prog = append(prog,
			jump(opJgeK, x32SyscallBit, 0, 2),
			jump(opJeqK, 0xffffffff, 1, 0),
			kill,
		)
	}
	tree, err := emitTree(ivs)
	if err != nil {
		return nil, err
	}
	prog = append(prog, tree...)
	if len(prog) > MaxInstructions {
		return nil, fmt.Errorf("seccomp: program has %d instructions, the kernel limit is %d", len(prog), MaxInstructions)
	}
	return prog, nil
}

// resolve validates the profile against a and maps syscall numbers to
// leaves. Syscalls without an entry get the default action.
func (p *Profile) resolve(a *archInfo) (map[int]leaf, error) {
	forb := make(map[string]bool, len(forbidden))
	for _, n := range forbidden {
		forb[n] = true
	}
	n := len(p.Allow) + len(p.Rules) + len(p.Denied)
	where := make(map[string]string, n)
	lookup := func(name, kind string) (int, error) {
		nr, ok := a.syscalls()[name]
		switch {
		case !ok && knownAnywhere(name):
			return 0, fmt.Errorf("seccomp: syscall %q does not exist on %s", name, a.name)
		case !ok:
			return 0, fmt.Errorf("seccomp: unknown syscall %q", name)
		case forb[name]:
			return 0, fmt.Errorf("seccomp: syscall %q is forbidden and cannot be allowed", name)
		case where[name] != "":
			return 0, fmt.Errorf("seccomp: syscall %q listed twice (%s and %s)", name, where[name], kind)
		}
		where[name] = kind
		return nr, nil
	}
	leaves := make(map[int]leaf, n)
	for _, name := range p.Allow {
		nr, err := lookup(name, "allow")
		if err != nil {
			return nil, err
		}
		leaves[nr] = leaf{action: ActionAllow}
	}
	for i := range p.Rules {
		r := &p.Rules[i]
		nr, err := lookup(r.Syscall, "rules")
		if err != nil {
			return nil, err
		}
		if err := r.validate(); err != nil {
			return nil, err
		}
		if len(r.Cases) == 0 {
			leaves[nr] = leaf{action: r.Else}
		} else {
			leaves[nr] = leaf{rule: r}
		}
	}
	for _, name := range p.Denied {
		if !knownAnywhere(name) {
			return nil, fmt.Errorf("seccomp: unknown syscall %q", name)
		}
		if w := where[name]; w != "" {
			return nil, fmt.Errorf("seccomp: syscall %q is both denied and in %s", name, w)
		}
		// Denied syscalls get the default action (EPERM); nothing to emit.
	}
	return leaves, nil
}

func (r *Rule) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("seccomp: rule for %q: %s", r.Syscall, fmt.Sprintf(format, args...))
	}
	if _, err := r.Else.ret(); err != nil {
		return bad("else: %v", err)
	}
	for i, c := range r.Cases {
		if _, err := c.Action.ret(); err != nil {
			return bad("case %d: %v", i, err)
		}
		if len(c.When) == 0 {
			return bad("case %d has no conditions (use else)", i)
		}
		for _, cond := range c.When {
			if cond.Arg < 0 || cond.Arg > 5 {
				return bad("case %d: argument index %d out of range 0..5", i, cond.Arg)
			}
			m := cond.mask()
			if cond.Low32 && (cond.Mask > 0xffffffff || cond.Value > 0xffffffff) {
				return bad("case %d: 32-bit condition on args[%d] with a 64-bit mask or value", i, cond.Arg)
			}
			if cond.Value&^m != 0 {
				return bad("case %d: args[%d] & %#x can never equal %#x", i, cond.Arg, m, cond.Value)
			}
		}
	}
	return nil
}

// mask returns the effective mask of c.
func (c Cond) mask() uint64 {
	switch {
	case c.Mask != 0:
		return c.Mask
	case c.Low32:
		return 0xffffffff
	}
	return ^uint64(0)
}

// emitTree emits a binary search over the intervals: every inner node is one
// JGE on the syscall number (in A); every leaf is a RET or an inline rule.
// All jumps are forward and local to the fragment.
func emitTree(ivs []interval) ([]SockFilter, error) {
	if len(ivs) == 1 {
		return emitLeaf(ivs[0].leaf)
	}
	mid := len(ivs) / 2
	left, err := emitTree(ivs[:mid])
	if err != nil {
		return nil, err
	}
	right, err := emitTree(ivs[mid:])
	if err != nil {
		return nil, err
	}
	k := ivs[mid].lo
	var out []SockFilter
	if len(left) <= 255 {
		out = append(out, jump(opJgeK, k, uint8(len(left)), 0))
	} else {
		// Conditional jumps reach 255 instructions; hop over a big left
		// subtree with JA, whose offset is 32 bits.
		out = append(out, jump(opJgeK, k, 0, 1), stmt(opJa, uint32(len(left))))
	}
	out = append(out, left...)
	return append(out, right...), nil
}

func emitLeaf(l leaf) ([]SockFilter, error) {
	if l.rule == nil {
		k, err := l.action.ret()
		if err != nil {
			return nil, err
		}
		return []SockFilter{stmt(opRetK, k)}, nil
	}
	var out []SockFilter
	inA := int64(-1) // seccomp_data offset known to be in A, or -1
	for _, c := range l.rule.Cases {
		code, after, err := emitCase(c, inA)
		inA = after
		if err != nil {
			return nil, fmt.Errorf("seccomp: rule for %q: %w", l.rule.Syscall, err)
		}
		out = append(out, code...)
	}
	k, err := l.rule.Else.ret()
	if err != nil {
		return nil, err
	}
	return append(out, stmt(opRetK, k)), nil
}

// emitCase emits the conditions of c followed by RET c.Action. A failing
// condition jumps just past the RET, i.e. to the next case or the else.
// inA is the seccomp_data offset already loaded in A on entry (-1 if
// unknown); the returned offset is the one in A when the case fails.
func emitCase(c Case, inA int64) ([]SockFilter, int64, error) {
	const fail = 0xff // placeholder in the jt/jf that means "to the end"
	var code []SockFilter
	var failA []int64 // what A holds at each failing jump
	word := func(off uint32, m, v uint32) {
		if m == 0 {
			return // nothing to compare in this half (validate made v 0)
		}
		if inA != int64(off) {
			code = append(code, stmt(opLdAbsW, off))
			inA = int64(off)
		}
		switch {
		case v == 0 && m != 0xffffffff:
			code = append(code, jump(opJsetK, m, fail, 0))
		case m != 0xffffffff:
			code = append(code, stmt(opAndK, m), jump(opJeqK, v, 0, fail))
			inA = -1
		default:
			code = append(code, jump(opJeqK, v, 0, fail))
		}
		failA = append(failA, inA)
	}
	for _, cond := range c.When {
		m, v := cond.mask(), cond.Value
		off := uint32(offArgs + 8*cond.Arg)
		word(off, uint32(m), uint32(v))
		if !cond.Low32 {
			word(off+4, uint32(m>>32), uint32(v>>32))
		}
	}
	k, err := c.Action.ret()
	if err != nil {
		return nil, -1, err
	}
	code = append(code, stmt(opRetK, k))
	after := int64(-1)
	if len(failA) > 0 && !slices.ContainsFunc(failA, func(w int64) bool { return w != failA[0] }) {
		after = failA[0]
	}
	for i := range code {
		if code[i].Code&0x07 != classJmp || code[i].Code == opJa {
			continue
		}
		dist := len(code) - (i + 1)
		if dist > 254 {
			return nil, -1, fmt.Errorf("case too long (%d instructions)", len(code))
		}
		if code[i].Jt == fail {
			code[i].Jt = uint8(dist)
		}
		if code[i].Jf == fail {
			code[i].Jf = uint8(dist)
		}
	}
	return code, after, nil
}
