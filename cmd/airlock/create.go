package main

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
)

type createFlags struct {
	labels, env, caches        []string
	policyFile, policyName     string
	image, memory, idleTimeout string
	disk                       string
	runtime                    string
	timeout                    time.Duration
	cpu                        float64
	pids                       int64
	record                     bool
}

func newCreateCmd() *cobra.Command {
	var f createFlags
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a sandbox in the daemon and print its id",
		Long: `Create a sandbox in the daemon (airlock serve) and print its id alone on
stdout. The sandbox lives until it is removed (airlock rm), its timeout
expires, or it stays idle for its idle timeout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCreate(cmd, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVarP(&f.labels, "label", "l", nil, "label KEY=VALUE (repeatable)")
	fl.StringVarP(&f.policyFile, "policy", "p", "", "policy file (YAML, the airlock run format without host paths), sent inline")
	fl.StringVar(&f.policyName, "policy-name", "", "name of a policy of the daemon's configuration")
	fl.StringVar(&f.runtime, "runtime", "", "isolation backend: native or gvisor (default: the policy's, else the daemon's default_runtime)")
	fl.StringVar(&f.image, "image", "", "name of an image of the daemon's configuration (default: the host's system directories, read-only)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set KEY=VALUE for every process, or pass KEY from this environment (repeatable)")
	fl.DurationVar(&f.timeout, "timeout", 0, "lifetime: the sandbox is killed that long after its creation (default: the daemon's)")
	fl.StringVar(&f.idleTimeout, "idle-timeout", "", `stop the sandbox after that long without activity; "none" to never (default: the daemon's)`)
	fl.StringArrayVar(&f.caches, "cache", nil, "persistent cache of the daemon: go, npm, pip or cargo (at /cache/NAME, with the tool's variables set), or NAME:/path (repeatable)")
	fl.StringVar(&f.memory, "memory", "", "memory limit (e.g. 512M, 2G)")
	fl.StringVar(&f.disk, "disk", "", "cap on the workspace and on the writable root layer (e.g. 4G; default: the policy's, else 1GiB)")
	fl.Float64Var(&f.cpu, "cpu", 0, "CPU cores (e.g. 1.5)")
	fl.Int64Var(&f.pids, "pids", 0, "maximum number of processes and threads")
	fl.BoolVar(&f.record, "record", false, "keep an activity record of the sandbox, written by the daemon (airlock events ID); needs a daemon running as root")
	cmd.MarkFlagsMutuallyExclusive("policy", "policy-name")
	addHostFlag(cmd)
	return cmd
}

// createRequest builds the request of f; its errors are usage errors.
func createRequest(f *createFlags) (*api.CreateSandboxRequest, error) {
	req := &api.CreateSandboxRequest{
		Image:      f.image,
		Runtime:    f.runtime,
		PolicyName: f.policyName,
		Resources:  api.Resources{Memory: f.memory, Disk: f.disk, CPU: f.cpu, Pids: f.pids},
		Caches:     f.caches,
		Record:     f.record,
	}
	var err error
	if req.Labels, err = parsePairs("--label", f.labels); err != nil {
		return nil, err
	}
	if req.Env, err = parseEnv(f.env); err != nil {
		return nil, err
	}
	if f.policyFile != "" {
		b, err := os.ReadFile(f.policyFile)
		if err != nil {
			return nil, fmt.Errorf("--policy: %v", err)
		}
		req.Policy = string(b)
	}
	if f.timeout < 0 {
		return nil, fmt.Errorf("--timeout %s: must be positive", f.timeout)
	}
	req.TimeoutSeconds = f.timeout.Seconds()
	switch s := strings.ToLower(f.idleTimeout); s {
	case "":
	case "none", "off", "never":
		req.IdleTimeoutSeconds = -1
	default:
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf(`--idle-timeout %s: want a positive duration (e.g. 10m) or "none"`, errdefs.Quote(f.idleTimeout))
		}
		req.IdleTimeoutSeconds = d.Seconds()
	}
	if f.cpu < 0 || f.pids < 0 {
		return nil, fmt.Errorf("--cpu and --pids must be positive")
	}
	if math.IsNaN(f.cpu) || math.IsInf(f.cpu, 0) {
		return nil, fmt.Errorf("--cpu %v: want a number of cores (e.g. 1.5)", f.cpu)
	}
	return req, nil
}

func runCreate(cmd *cobra.Command, f *createFlags) error {
	req, err := createRequest(f)
	if err != nil {
		return err
	}
	c, err := newClient(cmd)
	if err != nil {
		return err
	}
	sb, err := c.CreateSandbox(cmd.Context(), req)
	if err != nil {
		return apiFail(cmd, c, "create", err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
	return nil
}
