//go:build linux

package native

import (
	"testing"

	"github.com/airlock-dev/airlock/internal/agent"
)

// TestAdoptedExitBeforeClaim: a process the agent reported running when
// the sandbox was adopted, whose exit arrives before the new supervisor
// asked for it (Process), is still handed out once, with its status; it
// was reported missing, and the daemon then listed it as killed by a
// hangup (tests/serve's TestRecordServiceFollowTenantsRestart, once in
// CI: the exec it waited on was answered as soon as the listener was
// taken back). Controls: one still running is found, and not one twice.
func TestAdoptedExitBeforeClaim(t *testing.T) {
	sb := &sandbox{procs: map[uint64]*process{}}
	sb.takeState(&agent.State{Version: agent.Version, MaxID: 5, Running: []agent.Started{{ID: 4, Pid: 100}, {ID: 5, Pid: 101}}})
	sb.dispatch(&agent.Message{Type: agent.TypeExit, Exit: &agent.Exit{ID: 4, Code: 3}}, nil)

	p, ok := sb.Process(4)
	if !ok {
		t.Fatal("a process that exited right after adoption is not handed out")
	}
	select {
	case <-p.(*process).exit:
	default:
		t.Fatal("its exit is not known")
	}
	if st := p.(*process).status; st.Code != 3 || st.Signal != 0 {
		t.Fatalf("status %+v, want code 3", st)
	}
	if _, ok := sb.Process(4); ok {
		t.Fatal("handed out twice")
	}
	if q, ok := sb.Process(5); !ok || q.(*process).pid != 101 {
		t.Fatalf("the one still running: %v %v", q, ok)
	}
	// Claimed first, then exited: it leaves the table as before.
	sb.dispatch(&agent.Message{Type: agent.TypeExit, Exit: &agent.Exit{ID: 5}}, nil)
	if _, ok := sb.Process(5); ok {
		t.Fatal("a claimed process that exited is handed out again")
	}
}
