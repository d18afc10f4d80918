// Package initbin holds the sandbox init program (cmd/airlock-init) that
// `make build` compiles and embeds into the airlock binary. A sandbox's PID 1
// then starts a ~4 MB program that links only the sandbox code, instead of
// re-executing airlock itself, whose daemon dependencies would initialise in
// every sandbox. A plain `go build ./cmd/airlock` embeds nothing: Bin is
// empty and the runtime re-executes airlock (slower, same behaviour).
//
// It must never hold anything but the bytes and the build's identity.
package initbin

// BuildEnv names the variable through which airlock tells the init which
// build started it; the init refuses to run for another build.
const BuildEnv = "AIRLOCK_INIT_BUILD"

// BuildID identifies one `make build`: both programs get the same value
// (-ldflags -X), so an airlock never starts an init of another build.
var BuildID string

// Bin is the init program, or nil when none was embedded.
func Bin() []byte { return bin }

// Pid1 is cmd/airlock-pid1, the PID 1 of one-shot gVisor sandboxes that
// runs without the Go runtime, or nil when none was embedded (a plain
// build, or an architecture it does not support).
func Pid1() []byte { return pid1 }
