//go:build !airlock_init

package initbin

var bin []byte
