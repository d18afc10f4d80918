//go:build airlock_lean

package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/fullbin"
	"github.com/airlock-dev/airlock/internal/initbin"
	"github.com/airlock-dev/airlock/internal/progfile"
)

// daemonCommands are the commands that need the daemon's dependencies
// (SQLite, the MCP SDK, protobuf, metrics). This lean program does not link
// them, so they do not initialise on every `airlock run`; these commands
// execute the complete program embedded in it (internal/fullbin) with the
// same arguments, in this process (same pid, signals and descriptors).
func daemonCommands() []*cobra.Command {
	return []*cobra.Command{toFull("serve", serveShort), toFull("mcp", mcpShort), toFull("doctor", doctorShort)}
}

// fullCacheDir holds, as root, one copy of each build's complete program.
const fullCacheDir = "/run/airlock/full"

func toFull(use, short string) *cobra.Command {
	cmd := &cobra.Command{
		Use:                use,
		Short:              short,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return execFull(os.Args)
		},
	}
	// `airlock help serve` shows the complete program's help.
	cmd.SetHelpFunc(func(*cobra.Command, []string) {
		if err := execFull([]string{os.Args[0], use, "--help"}); err != nil {
			fmt.Fprintf(os.Stderr, "airlock: %v\n", err)
			os.Exit(2)
		}
	})
	return cmd
}

// execFull replaces this process with the complete program, run with args.
// It returns only on failure.
func execFull(args []string) error {
	bin := fullbin.Bin()
	if len(bin) == 0 {
		return errors.New("this airlock build carries no complete program for this command: rebuild with 'make build'")
	}
	f, err := progfile.Open(fullCacheDir, "airlock-full", initbin.BuildID, bin)
	if err != nil {
		return fmt.Errorf("cannot start the complete airlock program for this command (%v): as root it runs from %s, otherwise from an executable memfd (vm.memfd_noexec must be 0 or 1); a plain 'go build ./cmd/airlock' builds it without this step", err, fullCacheDir)
	}
	path := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	err = unix.Exec(path, args, os.Environ())
	f.Close()
	return fmt.Errorf("executing the complete airlock program: %w", err)
}
