//go:build !airlock_init

package initbin

var bin, pid1 []byte
