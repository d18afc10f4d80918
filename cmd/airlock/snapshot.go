package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/quota"
)

// Snapshots of a daemon sandbox's workspace: airlock snapshot, snapshots,
// fork, restore and diff.

func newSnapshotCmd() *cobra.Command {
	var name string
	var labels []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "snapshot ID [--name NAME] [--label K=V]...",
		Short: "Snapshot a daemon sandbox's /workspace and root layer",
		Long: `Snapshot the /workspace of a sandbox of airlock serve and the copy-on-write
layer over its root filesystem (what it wrote or deleted outside /workspace,
e.g. packages installed into /usr/local), with its processes frozen during
the copy. Processes and memory are not captured. Prints the snapshot's id;
the summary says whether the root layer is held.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := parseLabels(labels)
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			sn, err := c.CreateSnapshot(cmd.Context(), args[0], &api.CreateSnapshotRequest{Name: name, Labels: l})
			if err != nil {
				return apiFail(cmd, c, "snapshot "+arg(args[0]), err)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(sn)
			}
			fmt.Fprintln(cmd.OutOrStdout(), sn.ID)
			what := "workspace and root layer"
			if !sn.Root {
				what = "workspace only: the root layer could not be read"
			}
			how := "copied (no reflinks: see airlock doctor)"
			if sn.CopyOnWrite {
				how = "copy-on-write"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock: snapshot %s (%s): %d entries, %s, %s, in %.3fs (%s; processes not captured)\n",
				sn.ID, sn.Name, sn.Files, quota.Human(sn.Size), how, sn.Seconds, what)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a name, unique among your snapshots (default: its id)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "a label K=V (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the snapshot as JSON")
	addHostFlag(cmd)
	return cmd
}

func parseLabels(in []string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, l := range in {
		k, v, ok := cutLabel(l)
		if !ok {
			return nil, fmt.Errorf("--label %s: want K=V", arg(l))
		}
		out[k] = v
	}
	return out, nil
}

func cutLabel(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '=' {
			return s[:i], s[i+1:], i > 0
		}
	}
	return "", "", false
}

func newSnapshotsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "snapshots [ls | rm SNAPSHOT...]",
		Short: "List or remove workspace snapshots",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listSnapshots(cmd, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	addHostFlag(cmd)
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List your snapshots",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listSnapshots(cmd, asJSON)
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	addHostFlag(ls)
	rm := &cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Remove snapshots (by id or name); sandboxes made from them keep their copies",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			return eachRef(cmd, c, "snapshots rm", args, c.DeleteSnapshot)
		},
	}
	addHostFlag(rm)
	cmd.AddCommand(ls, rm)
	return cmd
}

func listSnapshots(cmd *cobra.Command, asJSON bool) error {
	c, err := newClient(cmd)
	if err != nil {
		return err
	}
	l, err := c.ListSnapshots(cmd.Context())
	if err != nil {
		return apiFail(cmd, c, "snapshots", err)
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(l)
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tNAME\tSANDBOX\tIMAGE\tHOLDS\tKEPT AS\tSIZE\tFILES\tCREATED")
	for _, s := range l.Snapshots {
		img := s.Image
		if img == "" {
			img = "-"
		}
		holds, kept := "workspace", "copy"
		if s.Root {
			holds = "workspace+root"
		}
		if s.CopyOnWrite {
			kept = "clone"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.ID, s.Name, s.SandboxID, img, holds, kept, quota.Human(s.Size), s.Files, s.CreatedAt.Local().Format(time.DateTime))
	}
	w.Flush()
	if l.Quota > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "airlock: snapshots hold %s of the daemon's quota of %s\n", quota.Human(l.Used), quota.Human(l.Quota))
	}
	return nil
}

func newForkCmd() *cobra.Command {
	var n int
	var labels []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fork ID [-n N] [--label K=V]...",
		Short: "Make N sandboxes from a snapshot of a sandbox's current state",
		Long: `Snapshot the sandbox, then make N sandboxes from it, each with its own copy
of /workspace and of the root layer (a write in one is seen by no other, nor
by the parent). All
or nothing: past the daemon's max_sandboxes nothing is made. Prints the new
sandboxes' ids, one a line.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 || n > 64 {
				// 0 would be the API's default, one sandbox.
				return fmt.Errorf("-n %d: want 1 to 64", n)
			}
			l, err := parseLabels(labels)
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			res, err := c.Fork(cmd.Context(), args[0], &api.ForkRequest{Count: n, Labels: l})
			if err != nil {
				return apiFail(cmd, c, "fork "+arg(args[0]), err)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			for _, sb := range res.Sandboxes {
				fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock: %d sandboxes from snapshot %s in %.3fs\n", len(res.Sandboxes), res.Snapshot.ID, res.Seconds)
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "count", "n", 1, "how many sandboxes to make (1 to 64)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "a label K=V of each new sandbox (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the snapshot and the sandboxes as JSON")
	addHostFlag(cmd)
	return cmd
}

func newRestoreCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore ID SNAPSHOT",
		Short: "Put a sandbox's /workspace and root layer back to a snapshot, in place",
		Long: `Put the sandbox's /workspace, and its root layer where the snapshot holds
it, back to the snapshot (id or name). The sandbox keeps its id, policy,
network audit and record; every process running in it ends.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			if _, err := c.Restore(cmd.Context(), args[0], args[1]); err != nil {
				return apiFail(cmd, c, "restore "+arg(args[0]), err)
			}
			return nil
		},
	}
	addHostFlag(cmd)
	return cmd
}

func newDiffCmd() *cobra.Command {
	var since string
	var asJSON, stat bool
	cmd := &cobra.Command{
		Use:   "diff ID [--since SNAPSHOT]",
		Short: "Show a daemon sandbox's /workspace changes since a snapshot or its creation",
		Long: `Show what changed in the sandbox's /workspace since the snapshot --since, or
since the sandbox's creation (from the snapshot it was made from or last
restored to, else from an empty workspace): added, modified, deleted, mode,
symlink and type changes, with unified diffs of text files.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			ch, err := c.Changes(cmd.Context(), args[0], since, !stat)
			if err != nil {
				return apiFail(cmd, c, "diff "+arg(args[0]), err)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(ch)
			}
			out := cmd.OutOrStdout()
			for _, x := range ch.Changes {
				detail := ""
				switch {
				case x.Kind == "mode":
					detail = fmt.Sprintf(" (%s -> %s)", x.OldMode, x.NewMode)
				case x.Kind == "symlink":
					detail = fmt.Sprintf(" (-> %s, was -> %s)", x.NewTarget, x.OldTarget)
				case x.Type == "file" && x.Kind == "modified":
					detail = fmt.Sprintf(" (%s -> %s)", quota.Human(x.OldSize), quota.Human(x.Size))
				case x.Type == "file" && x.Kind == "added":
					detail = fmt.Sprintf(" (%s)", quota.Human(x.Size))
				}
				fmt.Fprintf(out, "%-8s %s%s\n", x.Kind, x.Path, detail)
				if x.Diff != "" {
					fmt.Fprint(out, x.Diff)
				} else if x.Binary && !stat {
					fmt.Fprintf(out, "Binary file %s differs\n", x.Path)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "a snapshot (id or name); default: the sandbox's creation")
	cmd.Flags().BoolVar(&stat, "stat", false, "list the changes without diffs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the changes as JSON")
	addHostFlag(cmd)
	return cmd
}
