//go:build !airlock_lean

package main

import "github.com/spf13/cobra"

// daemonCommands are the commands that need the daemon's dependencies. This
// is the complete program, which runs them itself (see lean.go for the
// lean build's).
func daemonCommands() []*cobra.Command {
	return []*cobra.Command{newServeCmd(), newMCPCmd(), newDoctorCmd()}
}
