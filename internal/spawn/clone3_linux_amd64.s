#include "textflag.h"

// func rawClone3(args *cloneArgs, size uintptr, prog *childProg) (pid, errno uintptr)
//
// clone3 with the caller's arguments. In the parent it returns the child's
// pid or the errno. The child, on its own stack (args.stack), never
// returns: it runs prog's steps, each a system call, from registers alone
// (it shares the parent's memory and must not touch the Go runtime), and
// exits with 253 after reporting a failed step on prog.errFD.
//
// childProg: steps +0, n +8, errFD +16, failed [2] +24.
// step (72 bytes): nr +0, a[6] +8..+48, want +56, mode +64.
TEXT ·rawClone3(SB),NOSPLIT|NOFRAME,$0-40
	MOVQ	args+0(FP), DI
	MOVQ	size+8(FP), SI
	MOVQ	prog+16(FP), R12
	MOVQ	$435, AX // SYS_clone3
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $-4095
	JCC	failed
	MOVQ	AX, pid+24(FP)
	MOVQ	$0, errno+32(FP)
	RET
failed:
	NEGQ	AX
	MOVQ	$0, pid+24(FP)
	MOVQ	AX, errno+32(FP)
	RET

child:
	// R12: prog; R14: steps; R15: the step's index; BX: the step.
	MOVQ	0(R12), R14
	XORQ	R15, R15
next:
	CMPQ	R15, 8(R12)
	JCC	fail
	MOVQ	R15, BX
	IMULQ	$72, BX
	ADDQ	R14, BX
	MOVQ	0(BX), AX
	MOVQ	8(BX), DI
	MOVQ	16(BX), SI
	MOVQ	24(BX), DX
	MOVQ	32(BX), R10
	MOVQ	40(BX), R8
	MOVQ	48(BX), R9
	SYSCALL
	MOVQ	64(BX), CX
	CMPQ	CX, $2 // ignore
	JEQ	ok
	CMPQ	CX, $1 // mustEqual
	JEQ	equal
	CMPQ	AX, $-4095 // mustSucceed: -4095..-1 is an errno
	JCC	fail
	JMP	ok
equal:
	CMPQ	AX, 56(BX)
	JNE	fail
ok:
	INCQ	R15
	JMP	next
fail:
	MOVQ	R15, 24(R12)
	MOVQ	AX, 32(R12)
	MOVQ	$1, AX // SYS_write
	MOVQ	16(R12), DI
	LEAQ	24(R12), SI
	MOVQ	$16, DX
	SYSCALL
die:
	MOVQ	$231, AX // SYS_exit_group
	MOVQ	$253, DI
	SYSCALL
	JMP	die
