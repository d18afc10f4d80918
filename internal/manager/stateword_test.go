package manager

import (
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/store"
)

// TestStateWord: an error about a sandbox that is not usable names what it
// is doing, never "running, not running".
func TestStateWord(t *testing.T) {
	// Only whether the sandbox has a runtime matters here.
	var rt runtime.Sandbox = struct{ runtime.Sandbox }{}
	cases := []struct {
		state  string
		ending bool
		noRT   bool
		want   string
	}{
		{api.StateRunning, false, false, api.StateRunning},
		{api.StateRunning, true, false, "ending"},
		{api.StatePaused, true, false, "ending"},
		{api.StateRunning, false, true, "being made anew (a restore)"},
		{api.StateStopped, true, true, api.StateStopped},
		{api.StateFailed, false, true, api.StateFailed},
	}
	for _, c := range cases {
		sb := &Sandbox{rec: store.Sandbox{State: c.state}, ending: c.ending}
		if !c.noRT {
			sb.rt = rt
		}
		if got := sb.stateWord(); got != c.want {
			t.Errorf("%+v: %q, want %q", c, got, c.want)
		}
	}
}
