//go:build cgo

package native

// builtWithCgo: this binary links the C library. Its init cannot drop
// privileges on every thread at once (the Go runtime refuses
// syscall.AllThreadsSyscall in cgo programs).
const builtWithCgo = true
