//go:build linux

package native_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// fakeAgent answers one hello on its end of a channel: first what it sends
// before (messages an agent had under way when the supervisor changed),
// then the state.
func fakeAgent(t *testing.T, before []*agent.Message, state *agent.State) *agent.Conn {
	t.Helper()
	a, b, err := agent.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	srv := agent.NewConn(b)
	t.Cleanup(func() { srv.Close() })
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
