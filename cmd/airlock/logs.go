package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

func newLogsCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs [-f] ID PROC",
		Short: "Print the output of a process of a sandbox",
		Long: `Print the output of process PROC (an id like p3) of sandbox ID: its stdout
to stdout, its stderr to stderr. With -f, follow it until the process exits.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			id, pid := args[0], args[1]
			emit := outputPrinter(cmd, nil)
			if follow {
				if err := c.FollowOutput(cmd.Context(), id, pid, "", emit); err != nil {
					return apiFail(cmd, c, "logs", err)
				}
				return nil
			}
			s, err := c.Output(cmd.Context(), id, pid, client.OutputOptions{})
			if err != nil {
				return apiFail(cmd, c, "logs", err)
			}
			defer s.Close()
			for {
				ev, err := s.Next()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return apiFail(cmd, c, "logs", err)
				}
				if err := emit(ev); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output until the process exits")
	addHostFlag(cmd)
	return cmd
}

// outputPrinter returns a FollowOutput callback that writes stdout and
// stderr events where they belong, warns of lost output on stderr, and
// hands the exit event to exit (when not nil).
func outputPrinter(cmd *cobra.Command, exit func(api.OutputEvent)) func(api.OutputEvent) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	return func(ev api.OutputEvent) error {
		var err error
		switch ev.Kind {
		case api.EventStdout:
			_, err = stdout.Write(ev.Data)
		case api.EventStderr:
			_, err = stderr.Write(ev.Data)
		case api.EventLost:
			fmt.Fprintf(stderr, "airlock: warning: %d bytes of %s were lost before offset %d (the daemon keeps only the latest output)\n", ev.Bytes, ev.Stream, ev.Offset)
		case api.EventExit:
			if exit != nil {
				exit(ev)
			}
		}
		return err
	}
}
