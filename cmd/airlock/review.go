package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// newRunID returns 16 random hex digits: the id of the sandbox and of its
// workspace run.
func newRunID() string {
	var b [8]byte
	if _, err := unix.Getrandom(b[:], 0); err != nil {
		binaryTime := uint64(time.Now().UnixNano())
		for i := range b {
			b[i] = byte(binaryTime >> (8 * i))
		}
	}
	return hex.EncodeToString(b[:])
}

// notePending names the runs an earlier airlock left with changes that
// were never applied (it was killed, or --review left them pending).
func notePending(w io.Writer) {
	for _, l := range workspace.PendingRuns() {
		fmt.Fprintf(w, "airlock: run %s left changes to %s that were not applied: airlock review apply %s (or discard %s)\n", l.ID, quoteName(l.Workspace), l.ID, l.ID)
	}
}

// finishRun applies a run's changes to the workspace once its sandbox is
// gone and reports them. The command's own status stays the exit status,
// except that a command that succeeded but whose changes could not all be
// applied makes airlock exit 125.
func finishRun(w io.Writer, run *workspace.Run, cmdErr error, f *runFlags, ask *askTTY) error {
	defer run.Close()
	verbose := f.verbose
	code := 0
	var ee exitError
	if errors.As(cmdErr, &ee) {
		code = ee.code
	} else if cmdErr != nil {
		code = 1
	}
	if f.review {
		changes, err := run.Changes(true)
		if err != nil {
			fmt.Fprintf(w, "airlock: review: %v\n", err)
		}
		printChanges(w, run, changes)
		decision := ""
		switch {
		case f.reviewApply:
			decision = "apply"
		case f.reviewDiscard:
			decision = "discard"
		case len(changes) == 0 && err == nil:
			decision = "discard" // nothing to decide
		case ask != nil:
			decision = ask.ask(w, fmt.Sprintf("airlock: apply these changes to %s? [y/N] ", quoteName(run.Workspace)))
		}
		switch decision {
		case "discard":
			if err := run.Discard(); err != nil {
				fmt.Fprintf(w, "airlock: discard: %v\n", err)
			} else if len(changes) > 0 {
				fmt.Fprintf(w, "airlock: changes discarded; %s is as the host left it\n", quoteName(run.Workspace))
			}
			return cmdErr
		case "apply":
		default:
			fmt.Fprintf(w, "airlock: changes kept pending in %s:\n  airlock review diff %s\n  airlock review apply %s\n  airlock review discard %s\n", run.Dir, run.ID, run.ID, run.ID)
			if cps, _ := run.Checkpoints(); len(cps) > 0 {
				fmt.Fprintf(w, "airlock: %d checkpoints (airlock review diff|apply %s --checkpoint C):\n", len(cps), run.ID)
				for _, c := range cps {
					fmt.Fprintf(w, "  %s\n", describeCheckpoint(c))
				}
			}
			return cmdErr
		}
	}
	t0 := time.Now()
	rep, err := run.Apply()
	if err == nil && len(rep.Errors) == 0 {
		err = run.Finish(rep)
	}
	printReport(w, run, rep, verbose)
	if verbose {
		fmt.Fprintf(w, "airlock: workspace changes applied in %.2fms\n", float64(time.Since(t0))/1e6)
	}
	if err != nil || (rep != nil && len(rep.Errors) > 0) {
		if err != nil {
			fmt.Fprintf(w, "airlock: workspace changes not applied: %v\n", err)
		}
		fmt.Fprintf(w, "airlock: the rest of the changes are kept in %s; retry with: airlock review apply %s (or airlock review discard %s)\n", run.Dir, run.ID, run.ID)
		if code == 0 {
			return exitError{exitSetup}
		}
	}
	return cmdErr
}

// printReport says what landed on the host and what did not.
func printReport(w io.Writer, run *workspace.Run, rep *workspace.Report, verbose bool) {
	if rep == nil {
		return
	}
	if verbose || len(rep.Kept)+len(rep.Conflicts)+len(rep.Errors) > 0 {
		fmt.Fprintf(w, "airlock: workspace %s: %d changed, %d deleted\n", quoteName(run.Workspace), len(rep.Applied), len(rep.Deleted))
	}
	if len(rep.Kept) > 0 {
		fmt.Fprintf(w, "airlock: kept aside, not applied (protected paths): %s\nairlock:   the sandbox's versions are in %s\n", nameList(rep.Kept), run.Kept())
	}
	if len(rep.Conflicts) > 0 {
		fmt.Fprintf(w, "airlock: conflicts, changed on the host during the run (the host's version stays): %s\nairlock:   the sandbox's versions are in %s\n", nameList(rep.Conflicts), run.Conflicts())
	}
	for i, e := range rep.Errors {
		if i == 20 {
			fmt.Fprintf(w, "airlock: ... and %d more errors\n", len(rep.Errors)-20)
			break
		}
		fmt.Fprintf(w, "airlock: not applied: %s\n", quoteName(e))
	}
}

// nameList joins up to 20 names, each escaped if the sandbox chose odd
// bytes for it.
func nameList(names []string) string {
	var out []string
	for i, n := range names {
		if i == 20 {
			out = append(out, fmt.Sprintf("... and %d more", len(names)-20))
			break
		}
		out = append(out, quoteName(n))
	}
	return strings.Join(out, ", ")
}

// quoteName prints a name as it is when it is plain, else Go-quoted.
func quoteName(s string) string {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '"' || r == '\\' || r == 0xfffd {
			return strconv.Quote(s)
		}
	}
	return s
}

// printChanges lists a run's changes and the diffs of its text files;
// names and diff lines are escaped (the sandbox chose them).
func printChanges(w io.Writer, run *workspace.Run, changes []workspace.Change) {
	if len(changes) == 0 {
		fmt.Fprintf(w, "airlock: no changes to %s\n", quoteName(run.Workspace))
		return
	}
	fmt.Fprintf(w, "airlock: changes to %s (run %s):\n", quoteName(run.Workspace), run.ID)
	for _, c := range changes {
		fmt.Fprintf(w, "  %s\n", describeChange(c))
	}
	for _, c := range changes {
		if c.Diff != "" {
			for _, line := range strings.SplitAfter(c.Diff, "\n") {
				if line != "" {
					fmt.Fprintf(w, "%s\n", escapeLine(strings.TrimSuffix(line, "\n")))
				}
			}
		}
	}
}

func describeChange(c workspace.Change) string {
	p := quoteName(c.Path)
	switch c.Kind {
	case "added":
		switch c.Type {
		case "symlink":
			return fmt.Sprintf("added     %s -> %s", p, quoteName(c.NewTarget))
		case "dir":
			return fmt.Sprintf("added     %s", p)
		}
		return fmt.Sprintf("added     %s (%s, %d bytes)", p, c.NewMode, c.Size)
	case "modified":
		s := fmt.Sprintf("modified  %s (%d -> %d bytes)", p, c.OldSize, c.Size)
		if c.OldMode != c.NewMode {
			s += fmt.Sprintf(", %s -> %s", c.OldMode, c.NewMode)
		}
		if c.Binary {
			s += ", binary or large"
		}
		return s
	case "mode":
		return fmt.Sprintf("mode      %s %s -> %s", p, c.OldMode, c.NewMode)
	case "deleted":
		return fmt.Sprintf("deleted   %s", p)
	case "symlink":
		return fmt.Sprintf("symlink   %s: %s -> %s", p, quoteName(c.OldTarget), quoteName(c.NewTarget))
	case "type":
		return fmt.Sprintf("type      %s (now a %s)", p, c.Type)
	case "kept":
		if c.Type == "special" {
			return fmt.Sprintf("kept      %s (special file: never applied)", p)
		}
		return fmt.Sprintf("kept      %s (protected: never applied)", p)
	}
	return fmt.Sprintf("%-9s %s", c.Kind, p)
}

// escapeLine makes a diff line safe for a terminal: control characters
// (but tab) and invalid bytes are written as Go escapes.
func escapeLine(s string) string {
	clean := true
	for _, r := range s {
		if (r < 0x20 && r != '\t') || r == 0x7f || r == utf8.RuneError || (r >= 0x80 && r < 0xa0) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// askTTY is the caller's terminal as airlock reads it at the end of a
// --review run: a non-blocking duplicate of stdin that the command's input
// is copied from, so that airlock can stop that copy and ask.
type askTTY struct {
	in      *os.File
	fd      int
	copying sync.WaitGroup
}

func newAskTTY() (*askTTY, error) {
	fd, err := unix.FcntlInt(0, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &askTTY{in: os.NewFile(uintptr(fd), "stdin"), fd: fd}, nil
}

// ask stops the copy into the (finished) sandbox, asks, and returns
// "apply", "discard" or "" (no answer: keep pending).
func (a *askTTY) ask(w io.Writer, prompt string) string {
	a.in.SetReadDeadline(time.Now())
	done := make(chan struct{})
	go func() { a.copying.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	a.in.SetReadDeadline(time.Time{})
	// ^C (or another end) at the question leaves the run pending.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	defer signal.Stop(sigc)
	fmt.Fprint(w, prompt)
	answer := make(chan string, 1)
	go func() {
		var line []byte
		buf := make([]byte, 1)
		for len(line) < 256 {
			n, err := a.in.Read(buf)
			if n == 0 || err != nil || buf[0] == '\n' || buf[0] == '\r' {
				break
			}
			line = append(line, buf[0])
		}
		answer <- string(line)
	}()
	var line string
	select {
	case line = <-answer:
	case <-sigc:
		a.in.SetReadDeadline(time.Now())
	}
	fmt.Fprintln(w)
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return "apply"
	case "n", "no":
		return "discard"
	}
	return ""
}

func (a *askTTY) close() {
	unix.SetNonblock(a.fd, false)
	a.in.Close()
}

func newReviewCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "review [apply|discard|diff|rollback ID|DIR]",
		Short: "List workspace runs (pending, or applied and kept for rollback); apply, discard or roll back one",
		Long: `airlock run --workspace DIR keeps the sandbox's writes in a copy-on-write
layer and applies them when the command ends. A run whose changes were not
applied (airlock was killed, or an apply failed) stays pending here:
"airlock review" lists the runs, "airlock review apply ID" applies one
(protected paths kept aside, files changed on the host too left as the host
has them) and "airlock review discard ID" throws its changes away.
"airlock review rollback ID" puts the workspace back as it was before the
run's apply, completed or interrupted (entries changed on the host since
are left as they are). Instead of an ID, the commands take the workspace
directory: the one pending (for rollback: applied) run whose workspace it
is; with several, they are listed and nothing is done. A run's checkpoints
(airlock checkpoint, airlock run --checkpoint-every) are listed under it;
"airlock review diff|apply ID --checkpoint C" shows or applies the
workspace as of checkpoint C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return reviewList(cmd.OutOrStdout(), cmd.ErrOrStderr(), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the runs as JSON")
	var applyCheckpoint string
	var applyAfterRestart bool
	apply := &cobra.Command{
		Use:   "apply ID|DIR",
		Short: "Apply a pending run's changes to its workspace",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return reviewApply(cmd.ErrOrStderr(), args[0], applyCheckpoint, applyAfterRestart)
		},
	}
	apply.Flags().BoolVar(&applyAfterRestart, "after-restart", false, "apply a run whose machine restarted while its command ran, though files in its layer may be missing or cut short (its overlay was not synced)")
	apply.Flags().StringVar(&applyCheckpoint, "checkpoint", "", "apply the workspace as of this checkpoint (id or name) instead of the last state; the run's other states are dropped")
	discard := &cobra.Command{
		Use:   "discard ID|DIR",
		Short: "Throw a run's changes away (and what it kept aside)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stderr := cmd.ErrOrStderr()
			run, err := openPending(stderr, args[0])
			if err != nil {
				return err
			}
			if err := run.Discard(); err != nil {
				fmt.Fprintf(stderr, "airlock: discard %s: %v\n", run.ID, err)
				return exitError{1}
			}
			fmt.Fprintf(stderr, "airlock: run %s discarded; %s is as the host left it\n", run.ID, quoteName(run.Workspace))
			return nil
		},
	}
	var diffJSON bool
	var diffCheckpoint string
	diff := &cobra.Command{
		Use:   "diff ID|DIR",
		Short: "Show a pending run's changes: a list and a unified diff of text files",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stderr := cmd.ErrOrStderr()
			run, err := openRunArg(args[0], "pending", func(l workspace.Listed) bool { return l.Pending })
			if errors.Is(err, workspace.ErrBusy) && diffCheckpoint != "" {
				// A checkpoint of a run still going can be looked at.
				var l *workspace.Listed
				if l, err = runningRun(args[0]); err == nil {
					run, err = workspace.Peek(l.ID)
				}
			}
			if err != nil {
				fmt.Fprintf(stderr, "airlock: %v\n", err)
				return exitError{1}
			}
			defer run.Close()
			if !run.Pending() {
				fmt.Fprintf(stderr, "airlock: run %s has no pending changes (applied already)\n", run.ID)
				return exitError{1}
			}
			if err := workspaceThere(run); err != nil {
				fmt.Fprintf(stderr, "airlock: %v\n", err)
				return exitError{1}
			}
			var cp *workspace.Checkpoint
			if diffCheckpoint != "" {
				if cp, err = run.FindCheckpoint(diffCheckpoint); err != nil {
					fmt.Fprintf(stderr, "airlock: %v\n", err)
					return exitError{1}
				}
			}
			changes, err := run.ChangesAt(checkpointID(cp), true)
			if err != nil {
				fmt.Fprintf(stderr, "airlock: %v\n", err)
				return exitError{1}
			}
			if diffJSON {
				if changes == nil {
					changes = []workspace.Change{}
				}
				b, _ := json.MarshalIndent(changes, "", "  ")
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
				return nil
			}
			if cp != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "airlock: as of checkpoint %s\n", describeCheckpoint(*cp))
			}
			printChanges(cmd.OutOrStdout(), run, changes)
			return nil
		},
	}
	diff.Flags().BoolVar(&diffJSON, "json", false, "print the changes as JSON")
	diff.Flags().StringVar(&diffCheckpoint, "checkpoint", "", "the workspace as of this checkpoint (id or name) instead of the last state")
	rollback := &cobra.Command{
		Use:   "rollback ID|DIR",
		Short: "Put the workspace back as it was before a run's apply (completed or interrupted)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return reviewRollback(cmd.ErrOrStderr(), args[0])
		},
	}
	cmd.AddCommand(apply, discard, diff, rollback)
	return cmd
}

// openRunArg opens the run an argument names: a run id, or a workspace
// directory, whose one run that want accepts it is (what names those runs
// in messages: "pending"). With several, it lists them and opens none.
// openPending opens the pending run arg names (see openRunArg).
func openPending(stderr io.Writer, arg string) (*workspace.Run, error) {
	return openRunSaying(stderr, arg, "pending", func(l workspace.Listed) bool { return l.Pending })
}

// openRunSaying is openRunArg that says why it could not on stderr and
// returns the command's exit status as its error.
func openRunSaying(stderr io.Writer, arg, what string, want func(workspace.Listed) bool) (*workspace.Run, error) {
	run, err := openRunArg(arg, what, want)
	if err != nil {
		fmt.Fprintf(stderr, "airlock: %v\n", err)
		return nil, exitError{1}
	}
	return run, nil
}

func openRunArg(arg, what string, want func(workspace.Listed) bool) (*workspace.Run, error) {
	if workspace.IsID(arg) {
		r, err := workspace.Open(arg)
		if !errors.Is(err, workspace.ErrNoRun) {
			return r, err
		}
		if _, serr := os.Lstat(arg); serr != nil {
			return nil, err // not a directory either
		}
	}
	if arg == "" {
		return nil, errors.New("empty run id or workspace directory")
	}
	abs, err := filepath.Abs(arg)
	if err != nil {
		return nil, err
	}
	runs, err := workspace.ForWorkspace(abs)
	if err != nil {
		return nil, err
	}
	var match []workspace.Listed
	var others []string
	for _, l := range runs {
		if want(l) {
			match = append(match, l)
		} else {
			others = append(others, l.ID+" ("+listState(l)+")")
		}
	}
	switch len(match) {
	case 1:
		return workspace.Open(match[0].ID)
	case 0:
		_, serr := os.Stat(abs)
		switch {
		case len(others) > 0:
			return nil, fmt.Errorf("no %s run for workspace %s; its runs: %s", what, quoteName(abs), strings.Join(others, ", "))
		case serr != nil && !workspace.IsID(arg) && strings.IndexByte(arg, '/') < 0:
			return nil, fmt.Errorf("%s is neither a run id (16 hex digits, see airlock review) nor a workspace directory", quoteName(arg))
		case serr != nil:
			return nil, fmt.Errorf("no run for workspace %s (%v)", quoteName(abs), serr)
		}
		return nil, fmt.Errorf("no %s run for workspace %s (see airlock review)", what, quoteName(abs))
	}
	var list []string
	for _, l := range match {
		list = append(list, fmt.Sprintf("%s (started %s, %s)", l.ID, l.Started.Local().Format("2006-01-02 15:04:05"), quoteName(strings.Join(l.Command, " "))))
	}
	return nil, fmt.Errorf("%d %s runs have workspace %s; name one by its id: %s", len(match), what, quoteName(abs), strings.Join(list, "; "))
}

// workspaceThere refuses a run whose workspace is gone or was replaced,
// before anything is read or applied; the run stays as it is.
func workspaceThere(run *workspace.Run) error {
	var st unix.Stat_t
	if err := unix.Stat(run.Workspace, &st); err != nil {
		return fmt.Errorf("the workspace of run %s, %s, is gone (%v); nothing applied, the run is kept (airlock review discard %s drops it)", run.ID, quoteName(run.Workspace), err, run.ID)
	}
	if uint64(st.Dev) != run.Dev || st.Ino != run.Ino {
		return fmt.Errorf("the workspace of run %s, %s, is not the directory the run started with (it was replaced); nothing applied, the run is kept (airlock review discard %s drops it)", run.ID, quoteName(run.Workspace), run.ID)
	}
	return nil
}

func listState(l workspace.Listed) string {
	switch {
	case l.Busy:
		return "running"
	case l.RolledBack:
		return "rolled back"
	case l.Pending && l.Undoable:
		return "pending (apply interrupted)"
	case l.Pending:
		return "pending"
	}
	return "applied"
}

func reviewRollback(stderr io.Writer, arg string) error {
	run, err := openRunSaying(stderr, arg, "applied", func(l workspace.Listed) bool { return l.Undoable })
	if err != nil {
		return err
	}
	defer run.Close()
	if run.RolledBack {
		fmt.Fprintf(stderr, "airlock: run %s was rolled back already\n", run.ID)
		return exitError{1}
	}
	if !run.HasJournal() {
		fmt.Fprintf(stderr, "airlock: run %s has nothing applied to roll back\n", run.ID)
		return exitError{1}
	}
	if err := workspaceThere(run); err != nil {
		fmt.Fprintf(stderr, "airlock: %v\n", strings.Replace(err.Error(), "nothing applied", "nothing rolled back", 1))
		return exitError{1}
	}
	rep, err := run.Rollback()
	if err != nil {
		fmt.Fprintf(stderr, "airlock: %v\n", err)
		return exitError{1}
	}
	fmt.Fprintf(stderr, "airlock: run %s: %d entries of %s put back as before the apply\n", run.ID, len(rep.Restored), quoteName(run.Workspace))
	if len(rep.Conflicts) > 0 {
		fmt.Fprintf(stderr, "airlock: left as they are (changed after the apply): %s\n", nameList(rep.Conflicts))
	}
	for i, e := range rep.Errors {
		if i == 20 {
			fmt.Fprintf(stderr, "airlock: ... and %d more errors\n", len(rep.Errors)-20)
			break
		}
		fmt.Fprintf(stderr, "airlock: not rolled back: %s\n", quoteName(e))
	}
	if len(rep.Errors) > 0 {
		fmt.Fprintf(stderr, "airlock: retry with: airlock review rollback %s\n", run.ID)
		return exitError{1}
	}
	if err := run.SetRolledBack(); err != nil {
		fmt.Fprintf(stderr, "airlock: %v\n", err)
		return exitError{1}
	}
	fmt.Fprintf(stderr, "airlock: the sandbox's versions are in %s; airlock review discard %s drops them\n", run.RolledBackDir(), run.ID)
	if len(rep.Conflicts) > 0 {
		return exitError{1}
	}
	return nil
}

func reviewList(stdout, stderr io.Writer, asJSON bool) error {
	runs, err := workspace.List()
	if err != nil {
		fmt.Fprintf(stderr, "airlock: %v\n", err)
		return exitError{1}
	}
	if asJSON {
		if runs == nil {
			runs = []workspace.Listed{}
		}
		b, _ := json.MarshalIndent(runs, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return nil
	}
	if len(runs) == 0 {
		fmt.Fprintln(stderr, "airlock: no runs with pending or kept changes")
		return nil
	}
	fmt.Fprintf(stdout, "%-16s  %-8s  %-20s  %s\n", "ID", "STATE", "STARTED", "WORKSPACE")
	for _, l := range runs {
		state := listState(l)
		extra := ""
		if l.Kept > 0 || l.Conflicts > 0 {
			extra = fmt.Sprintf("  (kept %d, conflicts %d: %s)", l.Kept, l.Conflicts, l.Dir)
		}
		fmt.Fprintf(stdout, "%-16s  %-8s  %-20s  %s%s\n", l.ID, state, l.Started.Local().Format("2006-01-02 15:04:05"), quoteName(l.Workspace), extra)
		for _, c := range l.Checkpoints {
			fmt.Fprintf(stdout, "  checkpoint %s\n", describeCheckpoint(c))
		}
	}
	return nil
}

// describeCheckpoint is one line about a checkpoint: id (name), time,
// number of changes.
func describeCheckpoint(c workspace.Checkpoint) string {
	auto := ""
	if c.Auto {
		auto = ", automatic"
	}
	return fmt.Sprintf("%s  %s  %d changes%s", checkpointLabel(c), c.Time.Local().Format("2006-01-02 15:04:05.000"), c.Changes, auto)
}

func retryFlag(c *workspace.Checkpoint) string {
	if c == nil {
		return ""
	}
	return " --checkpoint " + c.ID
}

func checkpointID(c *workspace.Checkpoint) string {
	if c == nil {
		return ""
	}
	return c.ID
}

func reviewApply(stderr io.Writer, arg, checkpoint string, afterRestart bool) error {
	run, err := openPending(stderr, arg)
	if err != nil {
		return err
	}
	defer run.Close()
	run.AfterRestart = afterRestart
	if !run.Pending() {
		fmt.Fprintf(stderr, "airlock: run %s has no pending changes (applied already); kept and conflicting files, if any, are in %s\n", run.ID, run.Dir)
		return exitError{1}
	}
	if err := workspaceThere(run); err != nil {
		fmt.Fprintf(stderr, "airlock: %v\n", err)
		return exitError{1}
	}
	var cp *workspace.Checkpoint
	if checkpoint != "" {
		if cp, err = run.FindCheckpoint(checkpoint); err != nil {
			fmt.Fprintf(stderr, "airlock: %v\n", err)
			return exitError{1}
		}
	}
	// The sandbox of a killed airlock is ended by its reaper; apply only
	// once nothing of it can still write to the upper layer.
	native.Sweep(native.DefaultStateRoot())
	state := filepath.Join(native.DefaultStateRoot(), run.ID)
	for i := 0; i < 100; i++ {
		if _, err := os.Lstat(state); errors.Is(err, os.ErrNotExist) {
			break
		}
		if i == 99 {
			fmt.Fprintf(stderr, "airlock: the sandbox of run %s still exists (%s); try again once it is gone\n", run.ID, state)
			return exitError{1}
		}
		time.Sleep(100 * time.Millisecond)
	}
	rep, err := run.ApplyAt(checkpointID(cp))
	if err != nil {
		fmt.Fprintf(stderr, "airlock: %v\n", err)
		return exitError{1}
	}
	if len(rep.Errors) == 0 {
		err = run.Finish(rep)
	}
	if cp != nil {
		fmt.Fprintf(stderr, "airlock: run %s: the workspace as of checkpoint %s\n", run.ID, checkpointLabel(*cp))
	}
	printReport(stderr, run, rep, true)
	if err != nil || len(rep.Errors) > 0 {
		if err != nil {
			fmt.Fprintf(stderr, "airlock: %v\n", err)
		}
		fmt.Fprintf(stderr, "airlock: not every change was applied; the rest stay in %s (retry: airlock review apply %s%s)\n", run.Dir, run.ID, retryFlag(cp))
		return exitError{1}
	}
	return nil
}
