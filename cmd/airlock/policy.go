package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/record"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Work with policy files",
		// Runnable, so that an unknown subcommand is an error.
		Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	var from, out string
	suggest := &cobra.Command{
		Use:   "suggest --from RECORD",
		Short: "Suggest the narrowest policy that allows a recorded run (airlock run --record)",
		Long: `Read an activity record (airlock run --record FILE) and print a policy file, with
comments, that allows what the recorded run did: the network hosts and ports it
reached (the requests that were denied are listed as comments and stay
denied) and resources with headroom over its peaks. Review it before use.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			stderr := cmd.ErrOrStderr()
			fail := func(format string, a ...any) error {
				fmt.Fprintf(stderr, "airlock: "+format+"\n", a...)
				return exitError{2}
			}
			if from == "" {
				return fail("policy suggest: --from RECORD is required")
			}
			f, err := os.Open(from)
			if err != nil {
				return fail("policy suggest: %v", err)
			}
			defer f.Close()
			evs, err := record.Read(f)
			if err != nil {
				return fail("policy suggest: %s: %v", errdefs.Quote(from), err)
			}
			if len(evs) == 0 || evs[0].Type != record.TypeStart {
				return fail("policy suggest: %s is not an activity record (no start event)", errdefs.Quote(from))
			}
			text := record.Suggest(evs, from)
			// What is printed must be a policy airlock accepts.
			if _, err := policy.Parse("suggestion", []byte(text)); err != nil {
				return fail("policy suggest: the suggestion does not parse (a bug): %v", err)
			}
			if out == "" {
				_, err = fmt.Fprint(cmd.OutOrStdout(), text)
				return err
			}
			if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
				return fail("policy suggest: %v", err)
			}
			return nil
		},
	}
	suggest.Flags().StringVar(&from, "from", "", "the activity record (JSON lines)")
	suggest.Flags().StringVarP(&out, "output", "o", "", "write the policy to FILE instead of stdout")
	cmd.AddCommand(suggest)
	return cmd
}
