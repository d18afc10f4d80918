package spawn

const haveClone3 = true

// rawClone3 is in clone3_linux_amd64.s.
func rawClone3(args *cloneArgs, size uintptr, prog *childProg) (pid, errno uintptr)
