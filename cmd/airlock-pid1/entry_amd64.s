#include "textflag.h"

// start is the program's entry (go build -ldflags=-E=main.start): the
// kernel's initial stack (argc, argv, envp, auxv) is at SP. The Go runtime
// is linked but never started. Go code reads the goroutine pointer from
// thread-local storage on entry (the ABI wrappers load it into R14), so the
// FS base points into a zeroed block first: g is nil, which the nosplit
// code below never dereferences.
TEXT main·start(SB),NOSPLIT|NOFRAME,$0
	MOVQ	SP, R12
	LEAQ	main·tlsBlock+64(SB), SI
	MOVQ	$0x1002, DI // ARCH_SET_FS
	MOVQ	$158, AX    // SYS_arch_prctl
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JLS	tlsok
	MOVQ	$125, DI
	MOVQ	$231, AX // SYS_exit_group
	SYSCALL
tlsok:
	ANDQ	$~15, SP
	SUBQ	$16, SP
	MOVQ	R12, 0(SP)
	CALL	main·run(SB)
	MOVQ	$125, DI // run never returns
	MOVQ	$231, AX
	SYSCALL
	RET

// func sys(trap, a1, a2, a3, a4, a5, a6 uintptr) (r, errno uintptr)
TEXT main·sys(SB),NOSPLIT,$0-72
	MOVQ	trap+0(FP), AX
	MOVQ	a1+8(FP), DI
	MOVQ	a2+16(FP), SI
	MOVQ	a3+24(FP), DX
	MOVQ	a4+32(FP), R10
	MOVQ	a5+40(FP), R8
	MOVQ	a6+48(FP), R9
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	NEGQ	AX
	MOVQ	$-1, r+56(FP)
	MOVQ	AX, errno+64(FP)
	RET
ok:
	MOVQ	AX, r+56(FP)
	MOVQ	$0, errno+64(FP)
	RET

// func vfork() (r uintptr)
//
// clone(CLONE_VM|CLONE_VFORK|SIGCHLD), r as the kernel returns it (0 in the
// child, -errno on failure): the child runs on this stack until it executes
// the command or exits, while the parent waits in the kernel. Its own calls
// write where this function's return address was, so the address is kept in
// a register (each task has its own) and pushed back after the system call,
// as the syscall package's vfork does.
TEXT main·vfork(SB),NOSPLIT|NOFRAME,$0-8
	POPQ	R12
	MOVQ	$0x4111, DI // CLONE_VM|CLONE_VFORK|SIGCHLD
	XORQ	SI, SI
	XORQ	DX, DX
	XORQ	R10, R10
	XORQ	R8, R8
	MOVQ	$56, AX // SYS_clone
	SYSCALL
	PUSHQ	R12
	MOVQ	AX, r+0(FP)
	RET
