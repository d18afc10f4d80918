//go:build airlock_lean

package fullbin

import _ "embed"

// The file is written by `make build` (see the Makefile) and never
// committed.
//
//go:embed airlock-full
var bin []byte
