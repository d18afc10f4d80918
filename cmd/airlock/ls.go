package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

func newLsCmd() *cobra.Command {
	var labels, states []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls [flags]",
		Aliases: []string{"list"},
		Short:   "List the daemon's sandboxes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lm, err := parsePairs("--label", labels)
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			sbs, err := c.AllSandboxes(cmd.Context(), client.ListOptions{States: states, Labels: lm})
			if err != nil {
				return apiFail(cmd, c, "ls", err)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(sbs)
			}
			printSandboxes(cmd, sbs, time.Now())
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVarP(&labels, "label", "l", nil, "only sandboxes with label KEY=VALUE (repeatable: all must match)")
	fl.StringArrayVar(&states, "state", nil, "only sandboxes in this state: creating, running, paused, stopped, failed (repeatable)")
	fl.BoolVar(&asJSON, "json", false, "print a JSON array")
	addHostFlag(cmd)
	return cmd
}

func printSandboxes(cmd *cobra.Command, sbs []api.Sandbox, now time.Time) {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tAGE\tEXPIRES\tLABELS")
	for _, sb := range sbs {
		expires := "-"
		if sb.ExpiresAt != nil && sb.EndedAt == nil {
			if d := sb.ExpiresAt.Sub(now); d > 0 {
				expires = "in " + shortDuration(d)
			} else {
				expires = "now"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.State, shortDuration(now.Sub(sb.CreatedAt)), expires, formatLabels(sb.Labels))
	}
	tw.Flush()
}
