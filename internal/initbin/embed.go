//go:build airlock_init

package initbin

import _ "embed"

// The files are written by `make build` (see the Makefile) and never
// committed.
//
//go:embed airlock-init
var bin []byte

// Empty where the program has no entry point of its own (not linux/amd64).
//
//go:embed airlock-pid1
var pid1 []byte
