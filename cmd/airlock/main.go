// Command airlock runs untrusted code, most often written by an AI agent, in
// a sandbox. See README.md.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// The commands that need the daemon's dependencies (see daemonCommands).
const (
	serveShort  = "Run the sandbox service (HTTP API on a unix socket, optionally TCP)"
	mcpShort    = "Serve sandboxes as tools over the Model Context Protocol (stdio, or HTTP with --listen)"
	doctorShort = "Report the isolation layers this host can give and run a self-test sandbox"
)

// exitError carries an exit code out of a command without printing.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Exit codes of airlock's own failures (as opposed to the sandboxed
// command's status, which airlock passes through).
const (
	exitSetup    = 125 // the sandbox could not be created
	exitTimeout  = 124 // --timeout expired
	exitNotExec  = 126 // the command could not be started
	exitNotFound = 127 // the command does not exist in the sandbox
)

func main() {
	// Descriptors inherited from whoever started airlock must never reach
	// a sandbox (Go's exec does not close them): mark them close-on-exec.
	// fd 3 of the init and of the reaper is theirs; they handle it.
	sealInheritedFDs()
	// The sandbox's init is this same binary; dispatch before anything else.
	if len(os.Args) > 1 && os.Args[1] == native.InitArg {
		native.InitMain()
		return
	}
	if len(os.Args) > 1 && os.Args[1] == gvisor.InitArg {
		gvisor.InitMain()
		return
	}
	if len(os.Args) > 1 && os.Args[1] == gvisor.ExecArg {
		gvisor.ExecMain()
		return
	}
	if len(os.Args) > 1 && os.Args[1] == native.ResumeArg {
		native.ResumeMain()
		return
	}
	if len(os.Args) > 1 && os.Args[1] == native.ReapArg {
		native.ReapMain()
		return
	}
	root := newRootCmd
	if len(os.Args) > 1 && os.Args[1] == "run" {
		catchRunSignals() // meanwhile (see there)
		root = newRunRootCmd
	}
	if err := root().Execute(); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintf(os.Stderr, "airlock: %s\n", errdefs.Clip(err.Error()))
		os.Exit(2)
	}
}

// newRootCmd is the airlock command with all its subcommands.
func newRootCmd() *cobra.Command {
	root := newBareRoot()
	root.AddCommand(newRunCmd(), newCreateCmd(), newLsCmd(), newExecCmd(), newCpCmd(), newLogsCmd(), newPauseCmd(), newResumeCmd(), newRmCmd(), newNetCmd(), newEventsCmd(), newKeysCmd(), newPortCmd(), newReviewCmd())
	root.AddCommand(newCheckpointCmd())
	root.AddCommand(newSnapshotCmd(), newSnapshotsCmd(), newForkCmd(), newRestoreCmd(), newDiffCmd())
	root.AddCommand(newPolicyCmd())
	root.AddCommand(daemonCommands()...)
	strictHelp(root)
	root.Version = versionString()
	return root
}

// newRunRootCmd is the root with `run` alone, for `airlock run ...`: the
// flags of some thirty other commands were built on every run (about 0.15
// ms of CPU and 70 page faults here). TestRunRootAsFull checks that `run`
// answers the same from either root.
func newRunRootCmd() *cobra.Command {
	root := newBareRoot()
	root.AddCommand(newRunCmd())
	return root
}

func newBareRoot() *cobra.Command {
	return &cobra.Command{
		Use:               "airlock",
		Short:             "Run untrusted code in a sandbox",
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: refuseMarkerValues,
	}
}

// refuseMarkerValues refuses a flag whose value is "--": the flag was
// given no value and took the end-of-flags marker as one (`airlock run
// --net-log -- CMD` wrote the network log to a file named "--").
func refuseMarkerValues(cmd *cobra.Command, _ []string) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if err != nil {
			return
		}
		vals := []string{f.Value.String()}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			vals = sv.GetSlice()
		}
		for _, v := range vals {
			if v == "--" {
				err = fmt.Errorf("--%s needs a value: it took \"--\", the end of the flags (write --%s=VALUE, or ./-- for a file of that name)", f.Name, f.Name)
				return
			}
		}
	})
	return err
}

// strictHelp makes cobra's own commands refuse what they do not know:
// `airlock help TOPIC` and `airlock completion SHELL` printed help and
// exited 0 for an unknown topic or shell.
func strictHelp(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Run = nil
			c.RunE = func(_ *cobra.Command, args []string) error {
				cmd, rest, err := root.Find(args)
				if err != nil || len(rest) > 0 || len(args) > 0 && cmd == root {
					return fmt.Errorf("unknown help topic %q (airlock --help lists the commands)", strings.Join(args, " "))
				}
				return cmd.Help()
			}
		case "completion":
			// Runnable, so that its NoArgs refuses an unknown shell.
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		}
	}
}
