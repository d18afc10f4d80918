//go:build !airlock_lean

package fullbin

var bin []byte
