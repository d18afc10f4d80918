package main

import (
	"github.com/spf13/cobra"
)

func newPauseCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pause ID",
		Short: "Freeze every process of a running sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			if _, err := c.Pause(cmd.Context(), args[0]); err != nil {
				return apiFail(cmd, c, "pause "+arg(args[0]), err)
			}
			return nil
		},
	}
	addHostFlag(cmd)
	return cmd
}

func newResumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resume ID",
		Short: "Thaw a paused sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			if _, err := c.Resume(cmd.Context(), args[0]); err != nil {
				return apiFail(cmd, c, "resume "+arg(args[0]), err)
			}
			return nil
		},
	}
	addHostFlag(cmd)
	return cmd
}

func newRmCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rm ID...",
		Short: "Kill sandboxes and forget them",
		Long: `Kill each sandbox named and forget it. One that cannot be removed (an id
that does not exist) is reported and the others are still removed; the
status is then 1.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			return eachRef(cmd, c, "rm", args, c.DeleteSandbox)
		},
	}
	addHostFlag(cmd)
	return cmd
}
