//go:build !cgo

package native

const builtWithCgo = false
