package manager

import (
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/policy"
)

// An API policy may not set workspace.mode (the daemon's sandboxes have no
// host workspace to review); the control, the same policy without it, is
// allowed.
func TestAPIPolicyWorkspaceMode(t *testing.T) {
	bad, err := policy.Parse("policy", []byte("resources: {pids: 64}\nworkspace: {mode: review}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := apiPolicyAllowed(bad); err == nil || !strings.Contains(err.Error(), "workspace.mode is for airlock run") {
		t.Errorf("workspace.mode allowed: %v", err)
	}
	ok, err := policy.Parse("policy", []byte("resources: {pids: 64}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := apiPolicyAllowed(ok); err != nil {
		t.Errorf("control refused: %v", err)
	}
}
