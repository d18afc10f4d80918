package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/airlock-dev/airlock/internal/cache"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/egress/netsum"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/oneproc"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/record"
	"github.com/airlock-dev/airlock/internal/rundir"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/sandbox"
	"github.com/airlock-dev/airlock/internal/uidpool"
	"github.com/airlock-dev/airlock/internal/workspace"
)

type runFlags struct {
	workspace, policyFile, image, cgroupParent string
	env, ro, rw, binds, deny                   []string
	protect, unprotect, denySyscalls           []string
	memory, swap, disk, tmp, shm, fsize        string
	pids                                       int64
	cpu                                        float64
	nofile                                     uint64
	timeout                                    time.Duration
	noLandlock, noSeccomp, noCgroups           bool
	noTTY, verbose                             bool
	net                                        string
	netAllow, netDeny, addHosts, secrets       []string
	netLog                                     string
	uidPool                                    string
	runtime                                    string
	caches                                     []string
	workspaceMode                              string
	review, reviewApply, reviewDiscard         bool
	record                                     string
	checkpointEvery                            time.Duration
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARG...]",
		Short: "Run one command in a fresh sandbox, then destroy it",
		Long: `Run one command in a fresh sandbox and exit with its status (128+N when a
signal N killed it). The host's system directories are visible read-only under
a copy-on-write layer, the workspace is mounted read-write at /workspace (the
working directory), there is no network, and nothing of the caller's
environment is passed unless asked for.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRun(cmd, &f, args)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.StringVarP(&f.workspace, "workspace", "w", "", "host directory mounted read-write at /workspace (default: a fresh empty directory, removed afterwards)")
	fl.StringVar(&f.workspaceMode, "workspace-mode", "", "apply (or overlay, the default): the sandbox writes to a copy-on-write layer over --workspace, applied when the command ends (protected paths kept aside); review: the same, applied once reviewed (as --review); live: the directory itself, read-write (missing protected paths get placeholders). Overrides the policy's workspace.mode")
	fl.BoolVar(&f.review, "review", false, "with --workspace: apply nothing when the command ends; show the changes (a list and a diff on stderr) and ask, or keep them pending for airlock review")
	fl.BoolVar(&f.reviewApply, "apply", false, "with --review: apply the changes after showing them")
	fl.BoolVar(&f.reviewDiscard, "discard", false, "with --review: discard the changes after showing them")
	fl.DurationVar(&f.checkpointEvery, "checkpoint-every", 0, "with the workspace overlay: take a checkpoint of the workspace's changes every DURATION (at least 100ms; skipped when nothing changed), for airlock review diff|apply ID --checkpoint C (see also airlock checkpoint)")
	fl.StringVar(&f.runtime, "runtime", "", "isolation backend: native (default) or gvisor (gVisor's runsc; see airlock doctor)")
	fl.StringVarP(&f.policyFile, "policy", "p", "", "policy file (YAML); flags override it")
	fl.StringVar(&f.image, "image", "", "root filesystem directory (default: the host's system directories, read-only)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set KEY=VALUE, or pass KEY from this environment (repeatable)")
	fl.StringArrayVar(&f.ro, "ro", nil, "host path made visible read-only at the same path (repeatable)")
	fl.StringArrayVar(&f.rw, "rw", nil, "host path made visible read-write at the same path (repeatable)")
	fl.StringArrayVar(&f.binds, "bind", nil, "SRC:DST[:rw] bind mount from the host (read-only unless :rw; repeatable)")
	fl.StringArrayVar(&f.deny, "deny", nil, "path inside the sandbox to hide (repeatable)")
	fl.StringArrayVar(&f.caches, "cache", nil, "persistent cache shared by your sandboxes: go, npm, pip or cargo (at /cache/NAME, with the tool's variables set), or NAME:/path (repeatable; see README \"Caches\")")
	fl.StringArrayVar(&f.protect, "protect", nil, "workspace path that stays read-only (repeatable)")
	fl.StringArrayVar(&f.unprotect, "unprotect", nil, "remove a default protected workspace path by name (repeatable)")
	fl.StringArrayVar(&f.denySyscalls, "deny-syscall", nil, "syscall to deny besides the default seccomp profile (repeatable)")
	fl.StringVar(&f.memory, "memory", "", "memory limit (e.g. 512MiB; default 2GiB)")
	fl.StringVar(&f.swap, "swap", "", "swap allowed on top of memory (default 0)")
	fl.Int64Var(&f.pids, "pids", 0, "maximum number of processes and threads of the command (default 1024; airlock's agent comes on top)")
	fl.Float64Var(&f.cpu, "cpu", 0, "CPU cores (e.g. 1.5; default no cap)")
	fl.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit; the whole sandbox is killed when it expires (exit 124)")
	fl.StringVar(&f.disk, "disk", "", "cap on the writable copy-on-write layer and on the fresh workspace (default 1GiB)")
	fl.StringVar(&f.tmp, "tmp", "", "size of /tmp (default 512MiB)")
	fl.StringVar(&f.shm, "shm", "", "size of /dev/shm (default 64MiB)")
	fl.StringVar(&f.fsize, "fsize", "", "largest file a process may write (RLIMIT_FSIZE)")
	fl.Uint64Var(&f.nofile, "nofile", 0, "open file limit (default 1024)")
	fl.StringVar(&f.cgroupParent, "cgroup-parent", "", "cgroup under which to create the sandbox's cgroup")
	fl.BoolVar(&f.noLandlock, "insecure-no-landlock", false, "run without the Landlock layer (weaker; warned on every run)")
	fl.BoolVar(&f.noSeccomp, "insecure-no-seccomp", false, "run without the seccomp layer (weaker; warned on every run)")
	fl.BoolVar(&f.noCgroups, "insecure-no-cgroups", false, "run without cgroup limits (weaker; warned on every run)")
	fl.StringVar(&f.net, "net", "", "network mode: none (default), allowlist or open; outside none, traffic goes through airlock's egress gateway")
	fl.StringArrayVar(&f.netAllow, "net-allow", nil, "allow egress to HOST[:PORT] (*.domain wildcards, IPs, CIDRs, @pypi @npm @go @github; host.airlock.internal:PORT is a port of the host's loopback); implies --net allowlist (repeatable)")
	fl.StringArrayVar(&f.netDeny, "net-deny", nil, "deny egress to HOST[:PORT]; deny wins over allow (repeatable)")
	fl.StringArrayVar(&f.addHosts, "add-host", nil, "NAME:IP the egress gateway resolves NAME to, before DNS (repeatable)")
	fl.StringArrayVar(&f.secrets, "secret", nil, "VAR@HOST[,HOST...]: the sandbox sees a placeholder in $VAR; the egress gateway swaps in the value of your $VAR on HTTPS requests to HOST only (repeatable)")
	fl.StringVar(&f.record, "record", "", "as root, native runtime: write the activity record to FILE as JSON lines (every exec with argv, cwd and parent, exits, network requests, resource use; see README \"Activity record\"); FILE must be outside anything the sandbox sees")
	fl.StringVar(&f.netLog, "net-log", "", "append every egress connection and request to FILE as JSON lines (default: stderr with -v)")
	fl.BoolVar(&f.noTTY, "no-tty", false, "never allocate a terminal, even when stdin is one")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "report the isolation layers applied and setup timings")
	fl.StringVar(&f.uidPool, "uid-pool", "", "as root: START:SIZE, the host ids sandboxes' id ranges (65536 each) are leased from (default: $AIRLOCK_UID_POOL, else root's ranges in /etc/subuid and /etc/subgid, else 1879048192:134217728)")
	return cmd
}

// buildPolicy loads the policy file and applies the flags on top of it.
func buildPolicy(f *runFlags) (*policy.Policy, error) {
	p := &policy.Policy{}
	if f.policyFile != "" {
		var err error
		if p, err = policy.Load(f.policyFile); err != nil {
			return nil, err
		}
	}
	if f.workspace != "" {
		abs, err := filepath.Abs(f.workspace)
		if err != nil {
			return nil, err
		}
		p.Workspace = abs
	}
	if f.runtime != "" {
		p.Runtime = f.runtime
	}
	if f.image != "" {
		abs, err := filepath.Abs(f.image)
		if err != nil {
			return nil, err
		}
		p.Image = abs
	}
	for _, s := range []struct {
		flag string
		val  string
		dst  *int64
	}{
		{"--memory", f.memory, &p.Resources.Memory}, {"--swap", f.swap, &p.Resources.Swap},
		{"--disk", f.disk, &p.Resources.Disk}, {"--tmp", f.tmp, &p.Resources.Tmp},
		{"--shm", f.shm, &p.Resources.Shm}, {"--fsize", f.fsize, &p.Resources.FileSize},
	} {
		if s.val == "" {
			continue
		}
		n, err := policy.ParseSize(s.val)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %v", s.flag, errdefs.Quote(s.val), err)
		}
		*s.dst = n
	}
	if f.pids != 0 {
		p.Resources.Pids = f.pids
	}
	if f.cpu != 0 {
		p.Resources.CPU = f.cpu
	}
	if f.nofile != 0 {
		p.Resources.NoFile = f.nofile
	}
	if f.timeout != 0 {
		p.Resources.Timeout = f.timeout
	}
	ro, err := absAll("--ro", f.ro)
	if err != nil {
		return nil, err
	}
	rw, err := absAll("--rw", f.rw)
	if err != nil {
		return nil, err
	}
	p.Filesystem.ReadOnly = append(p.Filesystem.ReadOnly, ro...)
	p.Filesystem.Writable = append(p.Filesystem.Writable, rw...)
	p.Filesystem.Deny = append(p.Filesystem.Deny, f.deny...)
	for _, b := range f.binds {
		parts := strings.Split(b, ":")
		if len(parts) < 2 || len(parts) > 3 || (len(parts) == 3 && parts[2] != "rw" && parts[2] != "ro") {
			return nil, fmt.Errorf("--bind %s: want SRC:DST or SRC:DST:rw", errdefs.Quote(b))
		}
		if parts[0] == "" || parts[1] == "" {
			// An empty SRC would be the current directory (filepath.Abs).
			return nil, fmt.Errorf("--bind %s: empty path: want SRC:DST or SRC:DST:rw", errdefs.Quote(b))
		}
		src, _ := filepath.Abs(parts[0])
		p.Filesystem.Binds = append(p.Filesystem.Binds, policy.Bind{Source: src, Target: parts[1], Writable: len(parts) == 3 && parts[2] == "rw"})
	}
	p.Filesystem.Protect.Add = append(p.Filesystem.Protect.Add, f.protect...)
	p.Filesystem.Protect.Remove = append(p.Filesystem.Protect.Remove, f.unprotect...)
	p.Seccomp.Deny = append(p.Seccomp.Deny, f.denySyscalls...)
	p.Caches = append(p.Caches, f.caches...)
	if f.net != "" {
		p.Network.Mode = f.net
	}
	if f.net == policy.NetworkNone {
		// Rules for a sandbox that is to have no network would be
		// dropped without a word.
		for _, c := range []struct {
			flag string
			n    int
		}{{"--net-allow", len(f.netAllow)}, {"--net-deny", len(f.netDeny)}, {"--add-host", len(f.addHosts)}, {"--secret", len(f.secrets)}} {
			if c.n > 0 {
				return nil, fmt.Errorf("%s with --net none: the sandbox has no network for it to apply to; drop one of them", c.flag)
			}
		}
	}
	if len(f.netAllow) > 0 && (p.Network.Mode == "" || p.Network.Mode == policy.NetworkNone) && f.net == "" {
		p.Network.Mode = policy.NetworkAllowlist
	}
	p.Network.Allow = append(p.Network.Allow, f.netAllow...)
	p.Network.Deny = append(p.Network.Deny, f.netDeny...)
	for _, s := range f.secrets {
		name, hosts, ok := strings.Cut(s, "@")
		if !ok || name == "" || hosts == "" {
			return nil, fmt.Errorf("--secret %s: want VAR@HOST[,HOST...]", errdefs.Quote(s))
		}
		p.Network.Credentials = append(p.Network.Credentials, policy.Credential{
			Name: name, Hosts: strings.Split(hosts, ","), Secret: "env:" + name, Env: name,
		})
	}
	for _, c := range p.Network.Credentials {
		kind, src, _ := policy.ParseSecret(c.Secret)
		isEnv := kind == policy.SecretEnv
		for _, e := range f.env {
			k, _, set := strings.Cut(e, "=")
			if isEnv && k == src && !set {
				return nil, fmt.Errorf("--env %s would copy the secret of credential %s into the sandbox", k, c.Name)
			}
			if c.Env != "" && k == c.Env {
				return nil, fmt.Errorf("--env %s: that variable holds the placeholder of credential %s", k, c.Name)
			}
		}
	}
	if len(p.Network.Credentials) > 0 && !sandbox.HasNetwork(p) {
		return nil, errors.New("credentials (--secret, network.credentials) need network access: add --net-allow HOST or --net allowlist")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// workspaceMode decides how the workspace is given to the sandbox: --review,
// else --workspace-mode, else the policy's workspace.mode, else apply. It
// sets f.review for a review from either source and refuses combinations
// that cannot mean what they say.
func workspaceMode(f *runFlags, p *policy.Policy) (string, error) {
	mode := policy.WorkspaceApply
	if p.WorkspaceMode != "" {
		mode = p.WorkspaceMode
	}
	switch f.workspaceMode {
	case "":
	case "overlay", policy.WorkspaceApply:
		mode = policy.WorkspaceApply
	case policy.WorkspaceReview, policy.WorkspaceLive:
		mode = f.workspaceMode
	default:
		return "", fmt.Errorf("--workspace-mode %s: want apply (or overlay), review or live", errdefs.Quote(f.workspaceMode))
	}
	switch {
	case f.reviewApply && f.reviewDiscard:
		return "", errors.New("--apply and --discard: choose one")
	case (f.review || f.workspaceMode == policy.WorkspaceReview) && p.Workspace == "":
		return "", errors.New("--review needs --workspace DIR (a fresh workspace is thrown away anyway)")
	case f.review && f.workspaceMode != "" && mode != policy.WorkspaceReview:
		return "", fmt.Errorf("--review needs the overlay workspace, not --workspace-mode %s", errdefs.Quote(f.workspaceMode))
	case f.review:
		mode = policy.WorkspaceReview
	}
	if mode == policy.WorkspaceReview && p.Workspace == "" {
		// A review from the policy, with no host workspace: nothing of
		// the sandbox lands anywhere, so there is nothing to review.
		mode = policy.WorkspaceApply
	}
	if (f.reviewApply || f.reviewDiscard) && mode != policy.WorkspaceReview {
		return "", errors.New("--apply and --discard go with --review (or workspace mode review)")
	}
	f.review = mode == policy.WorkspaceReview
	return mode, nil
}

// uidPool resolves the pool the sandbox's host ids are leased from, as
// root: flag, else $AIRLOCK_UID_POOL, else the host's default (see
// uidpool.Resolve). Rootless there is none: root inside is the caller.
func uidPool(flag string) (*uidpool.Pool, error) {
	if os.Geteuid() != 0 {
		if flag != "" {
			return nil, errors.New("--uid-pool needs root: rootless, root inside the sandbox is you (one uid)")
		}
		return nil, nil
	}
	s := flag
	if s == "" {
		s = os.Getenv("AIRLOCK_UID_POOL")
	}
	var configured *uidpool.Range
	if s != "" {
		r, err := uidpool.ParseRange(s)
		if err != nil {
			return nil, err
		}
		configured = &r
	}
	p, err := uidpool.Resolve(configured)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// prepareCaches makes (or checks) the host directories of p's caches, in
// the invoking user's cache directory (see cache.DefaultDir).
func prepareCaches(p *policy.Policy) ([]cache.Mount, error) {
	if len(p.Caches) == 0 {
		return nil, nil
	}
	cs, err := cache.ParseAll(p.Caches)
	if err != nil {
		return nil, err
	}
	dir, err := cache.DefaultDir(os.Getenv, os.Geteuid())
	if err != nil {
		return nil, err
	}
	return cache.Prepare(dir, os.Geteuid(), cs)
}

// absAll makes the paths of a repeatable flag absolute, refusing an empty
// one, which filepath.Abs would turn into the current directory.
func absAll(flag string, paths []string) ([]string, error) {
	out := make([]string, len(paths))
	for i, p := range paths {
		if p == "" {
			return nil, fmt.Errorf("%s: empty path", flag)
		}
		out[i], _ = filepath.Abs(p)
	}
	return out, nil
}

// catchRunSignals starts catching the signals `airlock run` forwards to
// its command, once per process, on a goroutine: each costs a round trip
// to the Go runtime's signal thread (about 70 µs of CPU each on a 2-CPU
// VM), so main starts it as soon as it sees `run`, and runRun waits for it
// only before it makes the sandbox. SIGWINCH, which only a terminal's
// command gets, is caught by runRun once it knows there is one. They are
// never stopped: the process exits when the run ends, and stopping costs
// the same round trips again.
var catchRunSignals = sync.OnceValues(func() (chan os.Signal, chan struct{}) {
	sigc := make(chan os.Signal, 8)
	ready := make(chan struct{})
	go func() {
		for _, sig := range runtime.ForwardedSignals {
			if sig != unix.SIGWINCH {
				signal.Notify(sigc, sig)
			}
		}
		close(ready)
	}()
	return sigc, ready
})

func runRun(cmd *cobra.Command, f *runFlags, argv []string) (retErr error) {
	stderr := cmd.ErrOrStderr()
	fail := func(code int, format string, args ...any) error {
		fmt.Fprintf(stderr, "airlock: "+format+"\n", args...)
		return exitError{code}
	}
	sigc, sigReady := catchRunSignals()
	p, err := buildPolicy(f)
	if err != nil {
		return fail(exitSetup, "%v", err)
	}
	insecure := runtime.Insecure{NoLandlock: f.noLandlock, NoSeccomp: f.noSeccomp, NoCgroups: f.noCgroups}
	for _, w := range []struct {
		on    bool
		layer string
	}{{insecure.NoLandlock, "Landlock"}, {insecure.NoSeccomp, "seccomp"}, {insecure.NoCgroups, "cgroups (no memory, pids or CPU limits)"}} {
		if w.on {
			fmt.Fprintf(stderr, "airlock: WARNING: running without %s, as asked (--insecure-*)\n", w.layer)
		}
	}
	caches, err := prepareCaches(p)
	if err != nil {
		return fail(exitSetup, "%v", err)
	}
	spec, err := sandbox.Spec(p, sandbox.Opts{Insecure: insecure, CgroupParent: f.cgroupParent, Caches: caches})
	if err != nil {
		return fail(exitSetup, "%v", err)
	}
	if err := checkWritableSources(p); err != nil {
		return fail(exitSetup, "%v", err)
	}
	pool, err := uidPool(f.uidPool)
	if err != nil {
		return fail(exitSetup, "%v", err)
	}
	var wsRun *workspace.Run
	sandboxMade := false
	mode, err := workspaceMode(f, p)
	if err != nil {
		return fail(exitSetup, "%v", err)
	}
	if f.checkpointEvery != 0 {
		switch {
		case f.checkpointEvery < minCheckpointEvery:
			return fail(exitSetup, "--checkpoint-every %s: want at least %s (each checkpoint pauses the sandbox)", f.checkpointEvery, minCheckpointEvery)
		case p.Workspace == "" || mode == policy.WorkspaceLive || p.Runtime == policy.RuntimeGVisor:
			return fail(exitSetup, "--checkpoint-every needs the workspace overlay: --workspace DIR, native runtime, not --workspace-mode live")
		case insecure.NoCgroups:
			return fail(exitSetup, "--checkpoint-every pauses the sandbox with its cgroup freezer: it cannot go with --insecure-no-cgroups")
		}
	}
	switch mode {
	case policy.WorkspaceApply, policy.WorkspaceReview:
		if p.Workspace == "" {
			break
		}
		if p.Runtime == policy.RuntimeGVisor && os.Geteuid() != 0 {
			return fail(exitSetup, "the workspace overlay (changes applied when the command ends) needs root with the gvisor runtime (airlock mounts it on the host for runsc); run as root, or pass --workspace-mode live to give the sandbox the directory itself")
		}
		if fi, err := os.Stat(p.Workspace); err != nil || !fi.IsDir() {
			if err == nil {
				err = errors.New("not a directory")
			}
			return fail(exitSetup, "workspace %s: %v", errdefs.Quote(p.Workspace), err)
		}
		notePending(stderr)
		if spec.ID == "" {
			spec.ID = newRunID()
		}
		if wsRun, err = workspace.Create(spec.ID, p.Workspace, spec.Protected, argv); err != nil {
			return fail(exitSetup, "workspace overlay: %v (or pass --workspace-mode live)", err)
		}
		spec.WorkspaceLayer = wsRun.Layer()
		if f.review {
			if err := wsRun.SetReview(true); err != nil {
				return fail(exitSetup, "workspace overlay: %v", err)
			}
		} else {
			// Applied as soon as the command ends: its unmount need not
			// sync the whole filesystem of the changes directory first.
			// A run left pending (airlock killed) that outlives a restart
			// of the machine is refused by review apply.
			if err := wsRun.SetVolatile(); err != nil {
				return fail(exitSetup, "workspace overlay: %v", err)
			}
			spec.WorkspaceLayerVolatile = true
		}
		defer func() {
			if !sandboxMade {
				wsRun.Discard() // the command never ran: nothing to apply
			}
		}()
	case policy.WorkspaceLive:
		if p.Workspace != "" {
			src := "--workspace-mode live"
			if f.workspaceMode == "" {
				src = "workspace mode live (from the policy)"
			}
			fmt.Fprintf(stderr, "airlock: WARNING: %s: the sandbox writes to %s directly while it runs; protected paths that do not exist appear there as empty placeholder directories until it ends\n", src, p.Workspace)
		}
	}
	tty := !f.noTTY && term.IsTerminal(int(os.Stdin.Fd()))
	// With --review on a terminal, airlock asks on it at the end: the
	// command's stdin goes through a descriptor airlock can take back.
	stdin := os.Stdin
	var ask *askTTY
	if f.review && !f.reviewApply && !f.reviewDiscard && term.IsTerminal(int(os.Stdin.Fd())) {
		if ask, err = newAskTTY(); err != nil {
			return fail(exitSetup, "--review: %v", err)
		}
		defer ask.close()
		stdin = ask.in
	}
	env, err := sandbox.Env(p, f.env, tty, os.LookupEnv)
	if err != nil {
		return fail(exitSetup, "%v", err)
	}
	var setup *egress.Setup
	var rec *record.Recorder
	if f.record != "" {
		// Everything the record needs is checked and subscribed before the
		// sandbox exists: if it cannot be set up, nothing runs.
		var rf *os.File
		if rec, rf, err = openRecord(f.record, p, insecure, caches, native.DefaultStateRoot()+"-egress"); err != nil {
			return fail(exitSetup, "record: %v", err)
		}
		defer rf.Close()
		defer rec.Stop()
		spec.RecordExec = true
	}
	if sandbox.HasNetwork(p) {
		oneproc.Restore() // the gateway relays and re-encrypts on every CPU
		// The sandbox's CA and credentials: files outside the sandbox
		// (beside the runtime's state, not in a temporary directory a
		// workspace could be), bound read-only into it, removed when the
		// run ends.
		base := native.DefaultStateRoot() + "-egress"
		rundir.For(base)
		if err := os.MkdirAll(base, 0o700); err != nil {
			return fail(exitSetup, "egress setup: %v", err)
		}
		dir, err := os.MkdirTemp(base, "run-")
		if err != nil {
			return fail(exitSetup, "egress setup: %v", err)
		}
		defer os.RemoveAll(dir)
		if setup, err = egress.Prepare(dir, "run", p.Network, p.Image, nil); err != nil {
			return fail(exitSetup, "%v", err)
		}
		spec.Binds = append(spec.Binds, setup.Binds...)
		env = sandbox.MergeEnv(env, setup.Env)
	}

	// Signals that would kill airlock are caught from here on: forwarded to
	// the command once it runs; one that arrives while the sandbox is being
	// made ends the run before the command starts (or, for a command
	// started with the sandbox, is forwarded to it).
	<-sigReady

	ctx := context.Background()
	rt, err := runRuntime(p.Runtime, pool)
	if err != nil {
		return fail(exitSetup, "%v", err)
	}
	// The command's request is made before the sandbox: where nothing has
	// to happen between the two (no record, no egress gateway, no
	// workspace overlay), it goes in with the sandbox's setup and the
	// command starts as soon as the sandbox is ready (runtime.FirstExecer).
	req := &runtime.ExecRequest{Argv: argv, Env: env, Dir: "/workspace", TTY: tty}
	var copies sync.WaitGroup
	var closeAfterStart []*os.File
	if tty {
		// Before the size is read, so that no resize falls between.
		signal.Notify(sigc, unix.SIGWINCH)
		if ws, err := unix.IoctlGetWinsize(int(os.Stdin.Fd()), unix.TIOCGWINSZ); err == nil {
			req.Rows, req.Cols = ws.Row, ws.Col
		}
	} else {
		// Hand plain files and pipes to the command as they are; put a pipe
		// in front of any terminal so the sandbox never holds ours.
		streams := []struct {
			f   *os.File
			in  bool
			dst **os.File
		}{{stdin, true, &req.Stdin}, {os.Stdout, false, &req.Stdout}, {os.Stderr, false, &req.Stderr}}
		for _, s := range streams {
			if !term.IsTerminal(int(s.f.Fd())) {
				*s.dst = s.f
				continue
			}
			r, w, err := os.Pipe()
			if err != nil {
				return fail(exitSetup, "pipe: %v", err)
			}
			if s.in {
				*s.dst = r
				closeAfterStart = append(closeAfterStart, r)
				if ask != nil {
					ask.copying.Add(1)
				}
				go func(src *os.File) {
					io.Copy(w, src)
					w.Close()
					if ask != nil {
						ask.copying.Done()
					}
				}(s.f)
			} else {
				*s.dst = w
				closeAfterStart = append(closeAfterStart, w)
				copies.Add(1)
				go func(dst *os.File) { defer copies.Done(); io.Copy(dst, r); r.Close() }(s.f)
			}
		}
	}
	first, _ := rt.(runtime.FirstExecer)
	if rec != nil || sandbox.HasNetwork(p) || wsRun != nil {
		first = nil
	}
	t0 := time.Now()
	var sb runtime.Sandbox
	var proc runtime.Process
	var startErr error
	if first != nil {
		sb, proc, startErr = first.CreateExec(ctx, spec, req)
		if sb == nil {
			err, startErr = startErr, nil
		}
	} else {
		sb, err = rt.Create(ctx, spec)
	}
	if err != nil {
		for _, c := range closeAfterStart {
			c.Close()
		}
		return fail(exitSetup, "cannot create sandbox: %v", err)
	}
	created := time.Since(t0)
	if first != nil {
		created -= sb.Info().Steps["started"]
	}
	sandboxMade = true
	defer sb.Destroy(ctx)
	if wsRun != nil {
		// Registered before the others: it runs after them, once the
		// command has ended one way or another (exit, signal, timeout).
		defer func() {
			sb.Destroy(ctx)
			retErr = finishRun(stderr, wsRun, retErr, f, ask)
		}()
	}
	if rec != nil {
		rs, ok := sb.(recordSandbox)
		var l *os.File
		if ok {
			l = rs.ExecListener()
		}
		if l == nil {
			return fail(exitSetup, "record: the %s runtime handed over no exec listener", sb.Info().Runtime)
		}
		rec.Write(&record.Event{Type: record.TypeStart, Time: time.Now().UTC(), Version: record.SchemaVersion, Sandbox: sb.ID(), Command: argv})
		rec.Start(l, rs.InitPid(), sb.Info().CgroupPaths, time.Second)
		// After Destroy (registered later, so it runs earlier): every
		// process of the sandbox is gone and its events are queued.
		defer func() {
			sb.Destroy(ctx)
			rec.Stop()
			if wsRun != nil {
				recordFiles(rec, wsRun, sb.ID())
			}
			end := &record.Event{Type: record.TypeEnd, Time: time.Now().UTC(), Sandbox: sb.ID()}
			var ee exitError
			code := 0
			if errors.As(retErr, &ee) {
				code = ee.code
			} else if retErr != nil {
				code = 1
			}
			end.Code = &code
			rec.Write(end)
			if err := rec.Err(); err != nil {
				fmt.Fprintf(stderr, "airlock: record: writing %s: %v\n", f.record, err)
				if retErr == nil {
					retErr = exitError{exitSetup}
				}
			}
		}()
	}
	if sandbox.HasNetwork(p) {
		den := &netsum.Summary{}
		gw, err := startEgress(sb, p, setup, f, rec, den, stderr)
		if err != nil {
			return fail(exitSetup, "egress gateway: %v", err)
		}
		defer func() {
			gw.Close()
			if !f.verbose { // -v printed each one as it came
				den.Print(stderr, runReport(f.netLog != ""))
			}
		}()
	}
	// (A command started with the sandbox gets them once it waits below.)
	for pending := proc == nil && startErr == nil; pending; {
		select {
		case sig := <-sigc:
			if s, ok := sig.(unix.Signal); ok && s != unix.SIGWINCH {
				return fail(128+int(s), "%v during sandbox setup; the command was not started", sig)
			}
		default:
			pending = false
		}
	}
	if f.verbose {
		report(stderr, sb.Info(), insecure, created)
	}
	var ck *ckServer
	if wsRun != nil {
		// Checkpoints are taken while the command runs, never after:
		// ck.close() comes before every Destroy below.
		if ck, err = startCheckpoints(wsRun, sb, rec, f.checkpointEvery, stderr); err != nil {
			return fail(exitSetup, "%v", err)
		}
		defer ck.close()
	}

	if proc == nil && startErr == nil {
		proc, startErr = sb.Exec(ctx, req)
	}
	for _, c := range closeAfterStart {
		c.Close()
	}
	if startErr != nil {
		code := exitNotExec
		if errors.Is(startErr, runtime.ErrCommandNotFound) {
			code = exitNotFound
		}
		return fail(code, "%v", startErr)
	}
	if f.verbose {
		fmt.Fprintf(stderr, "airlock: command started %.2fms after the sandbox\n", float64(time.Since(t0)-created)/1e6)
	}

	var restore func()
	if tty {
		pty := proc.PTY()
		if state, err := term.MakeRaw(int(os.Stdin.Fd())); err == nil {
			restore = func() { term.Restore(int(os.Stdin.Fd()), state) }
			defer restore()
		}
		if ask != nil {
			ask.copying.Add(1)
		}
		go func() {
			io.Copy(pty, stdin)
			if ask != nil {
				ask.copying.Done()
			}
		}()
		copies.Add(1)
		go func() { defer copies.Done(); io.Copy(os.Stdout, pty) }()
	}

	var timeout <-chan time.Time
	if spec.Limits.Timeout > 0 {
		timer := time.NewTimer(spec.Limits.Timeout)
		defer timer.Stop()
		timeout = timer.C
	}
	waitc := make(chan runtime.ExitStatus, 1)
	go func() {
		st, err := proc.Wait(ctx)
		if err != nil {
			st = runtime.ExitStatus{Signal: int(unix.SIGKILL)}
		}
		waitc <- st
	}()
	for {
		select {
		case st := <-waitc:
			if rec != nil {
				rec.Sample() // the last sample, before the cgroup goes
			}
			ck.close()
			t1 := time.Now()
			sb.Destroy(ctx)
			if f.verbose {
				fmt.Fprintf(stderr, "airlock: destroyed in %.2fms\n", float64(time.Since(t1))/1e6)
			}
			waitCopies(&copies)
			return exitCode(st)
		case <-timeout:
			ck.close()
			sb.Kill()
			sb.Destroy(ctx)
			waitCopies(&copies)
			if restore != nil {
				restore()
			}
			return fail(exitTimeout, "timeout: the sandbox was killed after %s", spec.Limits.Timeout)
		case sig := <-sigc:
			if sig == unix.SIGWINCH {
				if tty {
					resize(proc.PTY())
				}
				continue
			}
			proc.Signal(sig)
		}
	}
}

// recordFiles writes a file event for each change the command made to
// the workspace, read from the upper layer (the sandbox is gone).
func recordFiles(rec *record.Recorder, run *workspace.Run, id string) {
	changes, err := run.FileChanges()
	now := time.Now().UTC()
	for _, c := range changes {
		e := &record.Event{Type: record.TypeFile, Time: now, Sandbox: id, Path: c.Path, Kind: c.Kind, FileType: c.Type, Mode: c.NewMode, Target: c.NewTarget, Protected: c.Protected}
		switch c.Kind {
		case "deleted":
			e.Mode = c.OldMode
			if c.Type == "file" {
				size := c.OldSize
				e.Size = &size
			}
		case "modified", "mode":
			e.OldMode = c.OldMode
		}
		if c.Type == "file" && c.Kind != "deleted" {
			size := c.Size
			e.Size = &size
		}
		if c.Kind == "mode" && e.OldMode == e.Mode {
			e.OldMode = ""
		}
		rec.Write(e)
	}
	if err != nil {
		rec.Write(&record.Event{Type: record.TypeLoss, Time: now, Sandbox: id, Reason: "file changes: " + err.Error()})
	}
}

// resize gives the sandbox's terminal the size of ours. Through
// SyscallConn: File.Fd would switch the pty to blocking mode under the
// goroutine copying its output.
func resize(pty *os.File) {
	ws, err := unix.IoctlGetWinsize(int(os.Stdin.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return
	}
	if rc, err := pty.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) })
	}
}

// waitCopies waits, briefly, for the output of the command to drain.
func waitCopies(wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
}

func exitCode(st runtime.ExitStatus) error {
	if code := st.ShellCode(); code != 0 {
		return exitError{code}
	}
	return nil
}

func report(w io.Writer, info runtime.Info, insecure runtime.Insecure, created time.Duration) {
	mode := "root"
	if info.Rootless {
		mode = "rootless"
	}
	ids := fmt.Sprintf("root inside = host uid %d gid %d", info.HostUID, info.HostGID)
	if info.HostIDs > 1 {
		ids = fmt.Sprintf("ids 0-%d inside = host uids %d-%d, gids %d-%d", info.HostIDs-1,
			info.HostUID, info.HostUID+info.HostIDs-1, info.HostGID, info.HostGID+info.HostIDs-1)
	}
	fmt.Fprintf(w, "airlock: sandbox %s (runtime %s, %s, %s)\n", info.ID, info.Runtime, mode, ids)
	ll := fmt.Sprintf("Landlock ABI %d", info.LandlockABI)
	if insecure.NoLandlock {
		ll = "Landlock OFF"
	}
	sc := "seccomp on"
	if insecure.NoSeccomp {
		sc = "seccomp OFF"
	}
	cg := "cgroups " + strings.Join(info.CgroupPaths, ",")
	if insecure.NoCgroups {
		cg = "cgroups OFF"
	}
	if info.Runtime == "gvisor" {
		fmt.Fprintf(w, "airlock: layers: gVisor Sentry (systrap) with runsc's seccomp and namespaces; %s inside; %s; capabilities dropped\n", sc, cg)
	} else {
		fmt.Fprintf(w, "airlock: layers: namespaces user,mnt,pid,net,ipc,uts,cgroup; %s; %s; %s; capabilities dropped\n", ll, sc, cg)
	}
	names := make([]string, 0, len(info.Steps))
	for k := range info.Steps {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s=%.2fms", k, float64(info.Steps[k])/1e6))
	}
	fmt.Fprintf(w, "airlock: created in %.2fms: %s\n", float64(created)/1e6, strings.Join(parts, " "))
}

// checkWritableSources refuses host directories the sandbox would write
// (the workspace in every mode: an overlay's changes are applied to it;
// writable paths and binds) on the host kernel's own filesystems.
func checkWritableSources(p *policy.Policy) error {
	if p.Workspace != "" {
		if err := runtime.CheckWritableSource("workspace", p.Workspace); err != nil {
			return err
		}
	}
	for _, w := range p.Filesystem.Writable {
		if err := runtime.CheckWritableSource("writable path", w); err != nil {
			return err
		}
	}
	for _, b := range p.Filesystem.Binds {
		if b.Writable {
			if err := runtime.CheckWritableSource("writable bind source", b.Source); err != nil {
				return err
			}
		}
	}
	return nil
}
