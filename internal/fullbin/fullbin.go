// Package fullbin holds the complete airlock program (every command, the
// daemon's dependencies included) that `make build` compiles and embeds
// into a lean airlock (build tag airlock_lean). The lean program links
// only what `airlock run` and the client commands need, so none of the
// daemon's dependencies (SQLite, the MCP SDK, protobuf, metrics) initialise
// on every `airlock run`; it executes this program for the commands that
// need them (serve, mcp, doctor). A plain `go build ./cmd/airlock` is the
// complete program itself and embeds nothing.
//
// It must never hold anything but the bytes.
package fullbin

// Bin is the complete program, or nil when none was embedded.
func Bin() []byte { return bin }
