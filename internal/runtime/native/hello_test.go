//go:build linux

package native_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// fakeAgent answers one hello on its end of a channel: first what it sends
// before (messages an agent had under way when the supervisor changed),
// then the state.
func fakeAgent(t *testing.T, before []*agent.Message, state *agent.State) *agent.Conn {
	t.Helper()
	a, srv := channel(t)
	go func() {
		for _, m := range before {
			if srv.Send(m) != nil {
				return
			}
		}
		// Then the hello, which the agent reads after what it sent.
		m, files, err := srv.Recv()
		for _, f := range files {
			f.Close()
		}
		if err == nil && m.Type == agent.TypeHello {
			srv.Send(&agent.Message{Type: agent.TypeState, State: state})
		}
	}()
	return agent.NewConn(a)
}

// channel is a control channel: the supervisor's end, and the agent's
// end as a Conn that the test's cleanup closes.
func channel(t *testing.T) (*os.File, *agent.Conn) {
	t.Helper()
	a, b, err := agent.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	srv := agent.NewConn(b)
	t.Cleanup(func() { srv.Close() })
	return a, srv
}

// A supervisor that adopts an agent gets answers the agent was sending to
// its predecessor before the state: they are dropped, and an exit among
// them is kept as an exit the state reports. Anything else is still a
// broken hello.
func TestAdoptDropsEarlyAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := []*agent.Message{
		{Type: agent.TypeData, Data: &agent.Data{Seq: 41, Data: []byte("old reader's")}},
		{Type: agent.TypeExit, Exit: &agent.Exit{ID: 3, Code: 7}},
		{Type: agent.TypeAck, Ack: &agent.Ack{Seq: 42}},
	}
	c := fakeAgent(t, before, &agent.State{Version: agent.Version, MaxID: 3, Running: []agent.Started{{ID: 2, Pid: 20}}})
	client, st, err := native.AdoptAgent(ctx, "0123456789abcdef", c.File())
	if err != nil {
		t.Fatalf("adopt with answers under way: %v", err)
	}
	defer client.Close()
	if len(st.Exited) != 1 || st.Exited[0].ID != 3 || st.Exited[0].Code != 7 {
		t.Fatalf("exit sent before the state: state's exits %+v", st.Exited)
	}
	p, ok := client.Process(3)
	if !ok {
		t.Fatal("process 3, which exited before the state, is unknown")
	}
	if es, err := p.Wait(ctx); err != nil || es.Code != 7 {
		t.Fatalf("process 3: %+v %v", es, err)
	}
	if _, ok := client.Process(2); !ok {
		t.Fatal("running process 2 of the state is unknown")
	}

	// Control: a message that is no answer at all fails the adoption.
	c2 := fakeAgent(t, []*agent.Message{{Type: agent.TypeReady}}, &agent.State{Version: agent.Version})
	if _, _, err := native.AdoptAgent(ctx, "0123456789abcdef", c2.File()); err == nil || !strings.Contains(err.Error(), `answered "ready" to hello`) {
		t.Fatalf("adopt after a stray %q: %v", agent.TypeReady, err)
	}
}

// The output an agent sends with an exit is taken only when it was asked
// for and no larger than asked: the agent is untrusted. A fake agent
// answers each exec with the output its argv names; the control (as much
// as asked for) is taken.
func TestCollectedOutputBounds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, srv := channel(t)
	go func() {
		for {
			m, files, err := srv.Recv()
			for _, f := range files {
				f.Close()
			}
			if err != nil {
				return
			}
			if m.Type != agent.TypeExec {
				continue
			}
			id := m.Exec.ID
			srv.Send(&agent.Message{Type: agent.TypeStarted, Started: &agent.Started{ID: id, Pid: 100 + int(id)}})
			out := []byte(m.Exec.Argv[0])
			srv.Send(&agent.Message{Type: agent.TypeExit, Exit: &agent.Exit{ID: id, Output: &agent.Output{Stdout: out[:len(out)/2], Stderr: out[len(out)/2:]}}})
		}
	}()
	client := native.NewAgentClient("0123456789abcdef", a)
	defer client.Close()
	for _, tc := range []struct {
		output  string
		collect int
		taken   bool
	}{
		{"12345678", 8, true},   // the control: what was asked for
		{"123456789", 8, false}, // more than asked for
		{"12345678", 0, false},  // not asked for
		{"", 8, true},           // nothing at all is an answer too
	} {
		p, err := client.Exec(ctx, &runtime.ExecRequest{Argv: []string{tc.output}, Capture: true, Collect: tc.collect})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, ok := p.(runtime.Collector).Collected()
		if ok != tc.taken || (ok && string(stdout)+string(stderr) != tc.output) {
			t.Errorf("%d bytes sent for Collect %d: taken %v (%q %q), want %v", len(tc.output), tc.collect, ok, stdout, stderr, tc.taken)
		}
	}
}
