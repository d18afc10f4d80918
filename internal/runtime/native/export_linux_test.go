//go:build linux

package native

import "github.com/airlock-dev/airlock/internal/runtime"

// SetAgentVersion makes sb speak to its agent as to one of protocol v, as
// for a sandbox adopted from an older daemon (before any other use of sb).
func SetAgentVersion(sb runtime.Sandbox, v int) { sb.(*sandbox).agentVersion = v }
