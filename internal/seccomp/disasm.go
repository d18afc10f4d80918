package seccomp

import (
	"fmt"
	"strings"
)

// Disassemble returns a stable human-readable listing of prog, one
// instruction per line. Jump targets are absolute instruction indexes.
// Comments name the loaded seccomp_data field, the syscall compared against
// (when the program's arch check names a supported ABI) and the action of
// each RET.
func Disassemble(prog []SockFilter) string {
	loads := loadedFields(prog)
	var arch *archInfo
	var b strings.Builder
	for i, ins := range prog {
		var text, note string
		target := func(off uint32) string {
			return fmt.Sprintf("%d", uint64(i)+1+uint64(off))
		}
		cmp := func(op string) {
			text = fmt.Sprintf("%-4s #%#x, %s, %s", op, ins.K, target(uint32(ins.Jt)), target(uint32(ins.Jf)))
			switch loads[i] {
			case offArch:
				if a := archByAudit(ins.K); a != nil {
					arch = a
					note = "AUDIT_ARCH_" + strings.ToUpper(a.name)
				}
			case offNr:
				if arch != nil && op != "jset" {
					if n := arch.nameOf(int(ins.K)); n != "" {
						note = map[string]string{"jeq": "== ", "jge": ">= ", "jgt": "> "}[op] + n
					}
				}
			}
		}
		switch ins.Code {
		case opLdAbsW:
			text = fmt.Sprintf("ld   [%d]", ins.K)
			note = fieldName(ins.K)
		case opJeqK:
			cmp("jeq")
		case opJgeK:
			cmp("jge")
		case opJgtK:
			cmp("jgt")
		case opJsetK:
			cmp("jset")
		case opJa:
			text = fmt.Sprintf("ja   %s", target(ins.K))
		case opAndK:
			text = fmt.Sprintf("and  #%#x", ins.K)
		case opRetK:
			text = fmt.Sprintf("ret  #%#x", ins.K)
			note = retName(ins.K)
		default:
			text = fmt.Sprintf("op=0x%02x jt=%d jf=%d k=%#x", ins.Code, ins.Jt, ins.Jf, ins.K)
		}
		if note != "" {
			fmt.Fprintf(&b, "%04d: %-36s ; %s\n", i, text, note)
		} else {
			fmt.Fprintf(&b, "%04d: %s\n", i, text)
		}
	}
	return b.String()
}

func fieldName(off uint32) string {
	switch {
	case off == offNr:
		return "nr"
	case off == offArch:
		return "arch"
	case off == 8 || off == 12:
		return "instruction_pointer"
	case off >= offArgs && off < offArgs+48 && off%4 == 0:
		half := "lo"
		if (off-offArgs)%8 == 4 {
			half = "hi"
		}
		return fmt.Sprintf("args[%d].%s", (off-offArgs)/8, half)
	}
	return ""
}

func retName(k uint32) string {
	switch k & retActionFull {
	case retAllow:
		return "ALLOW"
	case retKillProcess:
		return "KILL_PROCESS"
	case retKillThread:
		return "KILL_THREAD"
	case retTrap:
		return "TRAP"
	case retLog:
		return "LOG"
	case retErrno:
		switch errno := k & retData; errno {
		case errnoEPERM:
			return "ERRNO(EPERM)"
		case errnoENOSYS:
			return "ERRNO(ENOSYS)"
		default:
			return fmt.Sprintf("ERRNO(%d)", errno)
		}
	}
	return ""
}

// loadedFields returns, for each instruction, the seccomp_data offset
// whose value is in A when the instruction runs, or -1 if unknown or
// different along different paths. Jumps only go forward, so one pass in
// order sees every predecessor first.
func loadedFields(prog []SockFilter) []int64 {
	const unreached, unknown = -2, -1
	state := make([]int64, len(prog)+1)
	for i := range state {
		state[i] = unreached
	}
	if len(prog) > 0 {
		state[0] = unknown
	}
	flow := func(to uint64, s int64) {
		if to >= uint64(len(prog)) {
			return
		}
		switch state[to] {
		case unreached:
			state[to] = s
		case s:
		default:
			state[to] = unknown
		}
	}
	for i, ins := range prog {
		s := state[i]
		if s == unreached {
			continue
		}
		next := uint64(i) + 1
		switch {
		case ins.Code == opLdAbsW:
			flow(next, int64(ins.K))
		case ins.Code&0x07 == classRet:
		case ins.Code == opJa:
			flow(next+uint64(ins.K), s)
		case ins.Code&0x07 == classJmp:
			flow(next+uint64(ins.Jt), s)
			flow(next+uint64(ins.Jf), s)
		case ins.Code&0x07 == classLd, ins.Code&0x07 == classAlu, ins.Code&0x07 == classMsc:
			flow(next, unknown) // A changed to something we do not track
		default:
			flow(next, s)
		}
	}
	return state[:len(prog)]
}
