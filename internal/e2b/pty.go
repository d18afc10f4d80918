package e2b

import (
	"context"
	"errors"
	"os"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	pb "github.com/airlock-dev/airlock/internal/e2b/proto/process"
)

// A terminal started through envd: its master stays with the Start stream
// that reads it; SendInput writes to it and Update resizes it meanwhile.
type terminal struct {
	master *os.File
}

func ptyKey(id, procID string) string { return id + "/" + procID }

func (s *Server) terminal(id, procID string) *terminal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ptys[ptyKey(id, procID)]
}

// startPTY runs a Start with a pty: the process's terminal output goes to
// the stream as pty data, and its end follows. If the stream ends first
// (the client went away), the process gets SIGHUP, as from a closed
// terminal.
func (ps *processService) startPTY(ctx context.Context, id string, m *pb.StartRequest, er *api.ExecRequest, send func(*pb.ProcessEvent) error) error {
	size := m.GetPty().GetSize()
	rows, cols := clampSize(size.GetRows(), 24), clampSize(size.GetCols(), 80)
	procID, master, wait, err := ps.s.m.PTY(ctx, id, &api.PTYStart{ExecRequest: *er, Rows: rows, Cols: cols})
	if err != nil {
		return rpcErr(err)
	}
	key := ptyKey(id, procID)
	ps.s.mu.Lock()
	ps.s.ptys[key] = &terminal{master: master}
	ps.s.mu.Unlock()
	defer func() {
		ps.s.mu.Lock()
		delete(ps.s.ptys, key)
		ps.s.mu.Unlock()
		master.Close()
	}()
	pid, _ := pidOf(procID)
	if m.Tag != nil {
		ps.s.setTag(ctx, id, *m.Tag, pid)
	}
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: pid}}}); err != nil {
		ps.s.m.SignalPTY(context.Background(), id, procID, unix.SIGHUP)
		return err
	}
	sendErr := make(chan error, 1)
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				data := append([]byte(nil), buf[:n]...)
				if serr := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: data}}}}); serr != nil {
					sendErr <- serr
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	exited := make(chan api.PTYExit, 1)
	go func() { exited <- wait() }()
	var exit api.PTYExit
	select {
	case exit = <-exited:
	case err := <-sendErr:
		ps.s.m.SignalPTY(context.Background(), id, procID, unix.SIGHUP)
		return err
	case <-ctx.Done():
		ps.s.m.SignalPTY(context.Background(), id, procID, unix.SIGHUP)
		return ctx.Err()
	}
	select {
	case <-outDone:
	case <-time.After(2 * time.Second): // a background process still holds the terminal
	}
	end := &pb.ProcessEvent_EndEvent{Exited: true, ExitCode: int32(exit.ExitCode), Status: "exit status " + strconv.Itoa(exit.ExitCode)}
	if exit.Signal != 0 {
		end.ExitCode, end.Exited, end.Status = -1, false, "signal: "+signalName(exit.Signal)
	}
	return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}})
}

func clampSize(v uint32, def uint16) uint16 {
	switch {
	case v == 0:
		return def
	case v > 1000:
		return 1000
	}
	return uint16(v)
}

func (ps *processService) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	id := sandboxOf(ctx)
	procID, err := ps.selected(id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	t := ps.s.terminal(id, procID)
	if t == nil {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no terminal of process "+procID+" is open (only a PTY whose Start stream is open can be resized)"))
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		rows, cols := clampSize(size.GetRows(), 24), clampSize(size.GetCols(), 80)
		sc, err := t.master.SyscallConn()
		if err == nil {
			var ierr error
			if err = sc.Control(func(fd uintptr) {
				ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
			}); err == nil {
				err = ierr
			}
		}
		if err != nil {
			return nil, rpcErr(err)
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}
