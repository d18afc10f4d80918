package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// airlock port refuses a --listen address without a host, which would
// listen on every interface; with a host it goes on (here to a daemon
// that is not there).
func TestPortListenNeedsHost(t *testing.T) {
	nowhere := "unix://" + filepath.Join(t.TempDir(), "none.sock")
	run := func(listen string) error {
		cmd := newPortCmd()
		cmd.SetArgs([]string{"--host", nowhere, "--listen", listen, "sb-0000000000000000", "80"})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		return cmd.Execute()
	}
	for _, l := range []string{"", ":8080", "localhost"} {
		if err := run(l); err == nil || !strings.Contains(err.Error(), "want HOST:PORT with a host") {
			t.Errorf("--listen %q: %v", l, err)
		}
	}
	// Control: an address with a host passes the check and fails later,
	// reaching for the daemon.
	if err := run("127.0.0.1:0"); err == nil || strings.Contains(err.Error(), "want HOST:PORT") {
		t.Errorf("--listen 127.0.0.1:0: %v", err)
	}
}

// keys and policy refuse an unknown subcommand (they printed their help
// and exited 0); alone they print their help.
func TestUnknownSubcommand(t *testing.T) {
	for name, mk := range map[string]func() *cobra.Command{"keys": newKeysCmd, "policy": newPolicyCmd} {
		for _, args := range [][]string{{"bogus"}, {}} {
			cmd := mk()
			cmd.SetArgs(args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			if len(args) > 0 && (err == nil || !strings.Contains(err.Error(), `unknown command "bogus"`)) {
				t.Errorf("%s bogus: %v", name, err)
			}
			if len(args) == 0 && err != nil {
				t.Errorf("%s alone: %v", name, err)
			}
		}
	}
}

// help and completion refuse an unknown topic or shell (cobra's printed
// help and exited 0); known ones still print it (the controls).
func TestHelpTopics(t *testing.T) {
	for _, c := range []struct {
		args []string
		bad  string
	}{
		{[]string{"help", "bogus"}, `unknown help topic "bogus"`},
		{[]string{"help", "keys", "bogus"}, `unknown help topic "keys bogus"`},
		{[]string{"completion", "bogus"}, `unknown command "bogus"`},
		{[]string{"help"}, ""},
		{[]string{"help", "keys", "create"}, ""},
		{[]string{"completion"}, ""},
		{[]string{"completion", "bash"}, ""},
	} {
		root := newRootCmd()
		root.SetArgs(c.args)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		if c.bad == "" && err != nil || c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)) {
			t.Errorf("airlock %v: %v, want %q", c.args, err, c.bad)
		}
	}
}
