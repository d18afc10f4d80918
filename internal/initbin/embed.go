//go:build airlock_init

package initbin

import _ "embed"

// The file is written by `make build` (see the Makefile) and never
// committed.
//
//go:embed airlock-init
var bin []byte
