package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
)

func newKeysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Manage the API keys of the daemon (over its unix socket only)",
		Long: `Manage the API keys that clients present over TCP (Authorization: Bearer).
Keys can be managed only over the daemon's unix socket.`,
		Args: cobra.NoArgs, // runnable, so that an unknown subcommand is an error
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newKeysCreateCmd(), newKeysLsCmd(), newKeysRevokeCmd())
	return cmd
}

func newKeysCreateCmd() *cobra.Command {
	var name, tenant string
	cmd := &cobra.Command{
		Use:   "create [--name NAME] [--tenant TENANT]",
		Short: "Create an API key and print its secret",
		Long: `Create an API key and print its secret (shown only this once).

A key with --tenant lists, sees and touches only the sandboxes made with
keys of that tenant, on airlock's API and on the E2B-compatible one alike;
any other sandbox is "not found" to it. A key without a tenant is an
operator key and sees every sandbox.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			k, err := c.CreateTenantKey(cmd.Context(), name, tenant)
			if err != nil {
				return apiFail(cmd, c, "keys create", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), k.Key)
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock: created key %s; its secret (above) is shown only this once: store it now\n", k.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a name to tell the key by")
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant whose sandboxes alone the key reaches (default: none, an operator key)")
	addHostFlag(cmd)
	return cmd
}

func newKeysLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the API keys (never their secrets)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			keys, err := c.ListKeys(cmd.Context())
			if err != nil {
				return apiFail(cmd, c, "keys ls", err)
			}
			if keys == nil {
				keys = []api.APIKey{}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(keys)
			}
			printKeys(cmd, keys, time.Now())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	addHostFlag(cmd)
	return cmd
}

func printKeys(cmd *cobra.Command, keys []api.APIKey, now time.Time) {
	ago := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return shortDuration(now.Sub(*t)) + " ago"
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTENANT\tCREATED\tLAST USED\tREVOKED")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, dash(k.Name), dash(k.Tenant), ago(&k.CreatedAt), ago(k.LastUsed), ago(k.RevokedAt))
	}
	tw.Flush()
}

func newKeysRevokeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revoke KID",
		Short: "Revoke an API key: requests bearing it fail from now on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			if err := c.RevokeKey(cmd.Context(), args[0]); err != nil {
				return apiFail(cmd, c, "keys revoke "+arg(args[0]), err)
			}
			return nil
		},
	}
	addHostFlag(cmd)
	return cmd
}
