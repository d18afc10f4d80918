package gvisor

import specs "github.com/opencontainers/runtime-spec/specs-go"

// sandboxProcess is the OCI process of a command: root inside with no
// capabilities and no_new_privs (as in the native runtime, where root
// inside has every capability dropped).
func sandboxProcess(args, env []string, cwd string, rl []specs.POSIXRlimit) *specs.Process {
	return &specs.Process{
		Args:            args,
		Env:             env,
		Cwd:             cwd,
		NoNewPrivileges: true,
		Capabilities:    &specs.LinuxCapabilities{},
		Rlimits:         rl,
	}
}
