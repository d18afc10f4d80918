//go:build !airlock_lean

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/daemon"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/quota"
	"github.com/airlock-dev/airlock/internal/rundir"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/sandbox"
	"github.com/airlock-dev/airlock/internal/uidpool"
)

// check is one line of the doctor's report.
type check struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Required bool   `json:"required"` // needed for full isolation
	Detail   string `json:"detail"`
}

func newDoctorCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: doctorShort,
		Long: `Report each isolation layer on this host and run a self-test sandbox that tries
to read a canary file outside it and to write outside its workspace (both must
fail) next to controls that must succeed. Exits 1 when the host cannot give
full isolation.

As root it also checks the pool sandboxes' host id ranges are leased from
($AIRLOCK_UID_POOL, else root's ranges in /etc/subuid and /etc/subgid, else
the built-in default): it must not overlap an account in /etc/passwd or
/etc/group or another user's subordinate ids; and reports how many ranges
are leased.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			checks := hostChecks()
			pool, pc := poolCheck()
			checks = append(checks, pc)
			checks = append(checks, selfTest(pool)...)
			checks = append(checks, gvisorCheck())
			full := true
			for _, c := range checks {
				if c.Required && !c.OK {
					full = false
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				enc.Encode(struct {
					FullIsolation bool    `json:"full_isolation"`
					Checks        []check `json:"checks"`
				}{full, checks})
			} else {
				printChecks(out, checks, full)
			}
			if !full {
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func printChecks(w io.Writer, checks []check, full bool) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, c := range checks {
		status := "ok"
		switch {
		case !c.OK && c.Required:
			status = "FAIL"
		case !c.OK:
			status = "absent"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, status, c.Detail)
	}
	tw.Flush()
	if full {
		fmt.Fprintln(w, "\nfull isolation: yes")
	} else {
		fmt.Fprintln(w, "\nfull isolation: NO (see the FAIL lines)")
	}
}

func hostChecks() []check {
	var cs []check

	userns := check{Name: "user namespaces", Required: true}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err != nil {
		userns.Detail = "cannot read /proc/sys/user/max_user_namespaces: " + err.Error()
	} else if n := strings.TrimSpace(string(b)); n == "0" {
		userns.Detail = "disabled (user.max_user_namespaces = 0)"
	} else {
		userns.OK, userns.Detail = true, "max_user_namespaces = "+n
		if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" {
			userns.Detail += "; unprivileged use disabled (kernel.unprivileged_userns_clone = 0): only root can run airlock"
		}
	}
	cs = append(cs, userns)

	sc := check{Name: "seccomp", Required: true}
	if b, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail"); err == nil {
		sc.OK, sc.Detail = true, "filter mode; actions: "+strings.TrimSpace(string(b))
	} else {
		sc.Detail = "kernel without CONFIG_SECCOMP_FILTER"
	}
	cs = append(cs, sc)

	ll := check{Name: "landlock", Required: true}
	if abi, err := native.LandlockABI(); err == nil {
		ll.OK, ll.Detail = true, fmt.Sprintf("ABI %d", abi)
		if abi < 6 {
			ll.Detail += " (no signal/abstract-socket scoping before ABI 6)"
		}
	} else {
		ll.Detail = err.Error()
	}
	cs = append(cs, ll)

	info := cgroup.Detect()
	cg := check{Name: "cgroups", Required: true}
	if info.Reason == "" {
		cg.OK = true
		cg.Detail = fmt.Sprintf("%s, controllers %s", info.Version, strings.Join(info.Controllers, ","))
	} else {
		cg.Detail = fmt.Sprintf("%s: %s", info.Version, info.Reason)
	}
	cs = append(cs, cg)
	if info.Version == cgroup.V1 && info.Reason == "" {
		cs = append(cs, rcuCheck())
	}

	ov := check{Name: "overlayfs", Required: true}
	if b, err := os.ReadFile("/proc/filesystems"); err == nil && bytes.Contains(b, []byte("\toverlay\n")) {
		ov.OK, ov.Detail = true, "available"
	} else {
		ov.Detail = "overlay not in /proc/filesystems (modprobe overlay)"
	}
	cs = append(cs, ov)

	if os.Geteuid() == 0 {
		im := check{Name: "idmapped mounts", Required: true}
		var u unix.Utsname
		unix.Uname(&u)
		rel := unix.ByteSliceToString(u.Release[:])
		var major, minor int
		fmt.Sscanf(rel, "%d.%d", &major, &minor)
		if major > 5 || (major == 5 && minor >= 19) {
			im.OK, im.Detail = true, "kernel "+rel
		} else {
			im.Detail = "kernel " + rel + " < 5.19: root mode needs idmapped overlay layers"
		}
		cs = append(cs, im)
	}

	cs = append(cs, diskChecks()...)

	kvm := check{Name: "kvm", Detail: "/dev/kvm absent (microVM backends unavailable)"}
	if fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		const kvmGetAPIVersion = 0xAE00
		v, err := unix.IoctlRetInt(fd, kvmGetAPIVersion)
		unix.Close(fd)
		if err == nil {
			kvm.OK, kvm.Detail = true, fmt.Sprintf("/dev/kvm usable, API version %d", v)
		} else {
			kvm.Detail = "/dev/kvm present but KVM_GET_API_VERSION failed: " + err.Error()
		}
	} else if !os.IsNotExist(err) {
		kvm.Detail = "/dev/kvm present but not usable: " + err.Error()
	}
	// gVisor has its own check (doctor_gvisor_linux.go): runsc is looked
	// up where airlock finds it, its cache included, not only in PATH.
	cs = append(cs, kvm)
	if os.Geteuid() == 0 {
		cs = append(cs, runDirCheck())
	}
	return cs
}

// runDirCheck says whether root's runtime directory (every sandbox's state
// directory and state file, the uid leases) is in memory, as
// internal/rundir arranges where it can.
func runDirCheck() check {
	c := check{Name: "runtime directory"}
	rundir.For(rundir.Dir)
	mem, kind, err := rundir.InMemory(rundir.Dir)
	switch {
	case err != nil:
		c.Detail = fmt.Sprintf("%s: %v", rundir.Dir, err)
	case mem:
		c.OK, c.Detail = true, rundir.Dir+" is in memory (tmpfs)"
	default:
		c.Detail = fmt.Sprintf("%s is on %s, and it held files when airlock first needed it, so no tmpfs was mounted there: each sandbox's start and end waits for the file system's journal when there is other disk work; stop every airlock process and sandbox, remove %s, and the next airlock mounts a tmpfs there (or mount one yourself)", rundir.Dir, kind, rundir.Dir)
	}
	return c
}

// rcuCheck reports a start-up cost of cgroup v1 hosts (not a layer: it
// never fails isolation). Moving a process into a v1 cgroup takes the
// kernel's threadgroup lock for writing, which waits for an RCU grace
// period (about 10 ms here) unless grace periods are expedited; on v2 the
// sandbox is cloned straight into its cgroup and nothing waits.
//
// As root the sandbox's init is forked from a thread that joined the
// cgroup alone (cgroup.EnterThread), which recent kernels do without the
// lock; rootless, the started init is moved.
func rcuCheck() check {
	c := check{Name: "cgroup v1 attach"}
	b, err := os.ReadFile("/sys/kernel/rcu_expedited")
	switch {
	case os.Geteuid() == 0:
		c.OK, c.Detail = true, "as root the sandbox's init is forked from a thread that joined its cgroups alone: no process move, so (on kernels that skip the threadgroup lock for a thread moving itself, as 6.x do) no RCU grace period"
	case err != nil:
		c.Detail = "cannot read /sys/kernel/rcu_expedited: " + err.Error()
	case strings.TrimSpace(string(b)) != "0":
		c.OK, c.Detail = true, "rcu_expedited = 1: joining a sandbox's cgroups does not wait for a grace period"
	default:
		c.Detail = "each sandbox waits ~10 ms for an RCU grace period when it joins its cgroups; `echo 1 > /sys/kernel/rcu_expedited` (host-wide: expedited grace periods, at the cost of more inter-processor interrupts) removes the wait"
	}
	return c
}

// diskChecks reports how sandboxes' writes are capped: where fresh
// workspaces live (airlock run: a tmpfs; airlock serve: loop volumes when a
// test volume works here), and whether the kernel charges tmpfs inodes and
// pages to the sandbox's memory cgroup.
func diskChecks() []check {
	run := check{Name: "disk quota (airlock run)", OK: true,
		Detail: "a fresh workspace is a tmpfs capped at --disk (in memory); a --workspace DIR is the caller's and not capped"}
	serve := check{Name: "disk quota (airlock serve)"}
	if dir, err := os.MkdirTemp("", "airlock-doctor-volumes-"); err != nil {
		serve.Detail = err.Error()
	} else {
		if _, err := quota.Open(filepath.Join(dir, "volumes"), quota.KindAuto, 0); err != nil {
			serve.Detail = err.Error() + "; workspaces would be tmpfs, in memory (disk_quota: auto)"
		} else {
			serve.OK, serve.Detail = true, "loop: an ext4 image per sandbox in <data_dir>/volumes (made with the host's mkfs.ext4; a test volume worked), capped at its disk size"
		}
		os.RemoveAll(dir)
	}
	kmem := check{Name: "tmpfs memory accounting"}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	switch {
	case bytes.Contains(cmdline, []byte("cgroup.memory=nokmem")):
		kmem.Detail = "cgroup.memory=nokmem: tmpfs inodes are not charged to the sandbox's memory cgroup (only capped by nr_inodes)"
	case cgroup.Detect().Version == cgroup.V1 && !exists("/sys/fs/cgroup/memory/memory.kmem.usage_in_bytes"):
		kmem.Detail = "cgroup v1 without kernel memory accounting: tmpfs inodes are only capped by nr_inodes"
	default:
		kmem.OK, kmem.Detail = true, fmt.Sprintf("tmpfs pages and inodes are charged to the sandbox's memory cgroup; inodes capped at one per %d KiB of each tmpfs", quota.InodeRatio>>10)
	}
	return []check{run, serve, snapshotCheck(), sleepCheck(), kmem}
}

// snapshotCheck says how the daemon (its default data directory, or
// AIRLOCK_DATA_DIR) would take workspace snapshots: copy-on-write clones
// or file copies, and how to get the clones.
func snapshotCheck() check {
	c := check{Name: "workspace snapshots (airlock serve)"}
	cfg, err := daemon.Load("")
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	cfg.Defaults()
	method, detail := quota.PlanCopyOnWrite(filepath.Join(cfg.DataDir, "volumes"), filepath.Join(cfg.DataDir, "volumes.pool"))
	c.OK, c.Detail = method == quota.MethodClone, method+": "+detail
	if cfg.CopyOnWrite == "off" {
		c.OK, c.Detail = false, "copy: copy_on_write: off in the configuration"
	}
	return c
}

// sleepCheck: whether the agents of idle service sandboxes can sleep here
// (the sleeper is in this build, and the host executes memfds).
func sleepCheck() check {
	c := check{Name: "idle agents sleep (airlock serve, sleep_after)"}
	if err := native.SleepAvailable(); err != nil {
		c.Detail = "no: " + err.Error() + "; an idle sandbox then costs about 1.5 MiB instead of 0.6"
		return c
	}
	c.OK, c.Detail = true, "yes: an idle sandbox's PID 1 becomes a sleeper of one thread"
	return c
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// poolCheck reports the pool sandboxes' host ids come from, as root (the
// pool airlock run would use: $AIRLOCK_UID_POOL or the host's default).
// Rootless there is none: root inside is the caller.
func poolCheck() (*uidpool.Pool, check) {
	c := check{Name: "host id pool", Required: os.Geteuid() == 0}
	if os.Geteuid() != 0 {
		c.Detail = "rootless: every sandbox runs as you (one uid), so they share your per-user kernel limits (inotify, message queues, processes); as root each gets a range of its own"
		return nil, c
	}
	pool, err := uidPool("")
	if err != nil {
		c.Detail = err.Error()
		return nil, c
	}
	c.OK = true
	c.Detail = pool.String() + "; each sandbox owns its range and its user namespace (per-user kernel limits per sandbox)"
	leases := &uidpool.Leases{Dir: uidpool.DefaultDir}
	if list, err := leases.List(); err == nil {
		held := 0
		for _, l := range list {
			if l.Held {
				held++
			}
		}
		c.Detail += fmt.Sprintf("; %d ranges leased in %s (%d by a live sandbox or supervisor, the others are reclaimed once nothing of their sandbox remains)", len(list), leases.Dir, held)
	}
	return pool, c
}

// selfTest runs a real sandbox that tries to read a canary outside it and
// to write outside its workspace, next to controls that must succeed. The
// oracles are on the host: the canary's secret in the output, and files
// appearing on the host.
func selfTest(pool *uidpool.Pool) []check {
	fail := func(name, msg string) []check {
		return []check{{Name: name, Required: true, Detail: msg}}
	}
	dir, err := os.MkdirTemp("", "airlock-doctor-")
	if err != nil {
		return fail("self-test", err.Error())
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	ws := filepath.Join(dir, "ws")
	canary := filepath.Join(dir, "canary")
	secret := fmt.Sprintf("airlock-canary-%d", time.Now().UnixNano())
	if err := os.Mkdir(ws, 0o755); err != nil {
		return fail("self-test", err.Error())
	}
	os.WriteFile(canary, []byte(secret), 0o644)
	os.WriteFile(filepath.Join(ws, "control"), []byte(secret), 0o644)
	outside := "/usr/airlock-doctor-" + filepath.Base(dir)

	p := &policy.Policy{Workspace: ws}
	spec, err := sandbox.Spec(p, sandbox.Opts{})
	if err != nil {
		return fail("self-test", err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := (&native.Runtime{UIDPool: pool}).Create(ctx, spec)
	if err != nil {
		return fail("self-test sandbox", "cannot create a sandbox: "+err.Error())
	}
	defer sb.Destroy(ctx)
	env, _ := sandbox.Env(p, nil, false, func(string) (string, bool) { return "", false })
	run := func(script string) (string, int) {
		r, w, err := os.Pipe()
		if err != nil {
			return err.Error(), -1
		}
		null, _ := os.Open(os.DevNull)
		defer null.Close()
		proc, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Env: env, Dir: "/workspace", Stdin: null, Stdout: w, Stderr: w})
		w.Close()
		if err != nil {
			r.Close()
			return err.Error(), -1
		}
		out, _ := io.ReadAll(io.LimitReader(r, 1<<16))
		r.Close()
		st, err := proc.Wait(ctx)
		if err != nil {
			return err.Error(), -1
		}
		return string(out), st.ShellCode()
	}

	var cs []check
	out, _ := run("cat " + canary + " 2>&1")
	c := check{Name: "self-test: read canary outside", Required: true}
	c.OK = !strings.Contains(out, secret)
	c.Detail = map[bool]string{true: "denied (" + strings.TrimSpace(out) + ")", false: "LEAKED: the sandbox read " + canary}[c.OK]
	cs = append(cs, c)

	out, code := run("cat /workspace/control")
	c = check{Name: "self-test: read workspace (control)", Required: true, OK: code == 0 && strings.Contains(out, secret)}
	c.Detail = map[bool]string{true: "allowed", false: fmt.Sprintf("failed (exit %d: %s)", code, strings.TrimSpace(out))}[c.OK]
	cs = append(cs, c)

	out, code = run("touch /airlock-doctor 2>&1; echo x > " + outside + " 2>&1; true")
	_, statErr := os.Stat(outside)
	c = check{Name: "self-test: write outside workspace", Required: true, OK: os.IsNotExist(statErr) && strings.Contains(out, "touch:")}
	if c.OK {
		c.Detail = "host unchanged; root directory not writable"
	} else {
		c.Detail = fmt.Sprintf("host %s exists=%v, sandbox said %q", outside, statErr == nil, strings.TrimSpace(out))
		os.Remove(outside)
	}
	cs = append(cs, c)

	out, code = run("echo ok > /workspace/written")
	b, _ := os.ReadFile(filepath.Join(ws, "written"))
	c = check{Name: "self-test: write workspace (control)", Required: true, OK: code == 0 && string(b) == "ok\n"}
	c.Detail = map[bool]string{true: "allowed, visible on the host", false: fmt.Sprintf("failed (exit %d: %s)", code, strings.TrimSpace(out))}[c.OK]
	cs = append(cs, c)
	return cs
}
