package e2b

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-dev/airlock/api"
	pb "github.com/airlock-dev/airlock/internal/e2b/proto/process"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/manager"
)

// processService is envd's process service over airlock's processes. An
// E2B pid is the number of airlock's process id ("p7" is pid 7).
type processService struct{ s *Server }

// rpcErr maps an airlock error to a Connect error, which the SDKs turn into
// their own error types (NotFound, InvalidArgument, ...).
func rpcErr(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeInternal
	switch status(err) {
	case http.StatusNotFound:
		code = connect.CodeNotFound
	case http.StatusBadRequest:
		code = connect.CodeInvalidArgument
	case http.StatusConflict:
		code = connect.CodeFailedPrecondition
		if errors.Is(err, errdefs.ErrExists) {
			code = connect.CodeAlreadyExists
		}
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		code = connect.CodeResourceExhausted
	case http.StatusNotImplemented:
		code = connect.CodeUnimplemented
	case http.StatusForbidden:
		code = connect.CodePermissionDenied
	case http.StatusGatewayTimeout:
		code = connect.CodeDeadlineExceeded
		if errors.Is(err, context.Canceled) {
			code = connect.CodeCanceled
		}
	}
	return connect.NewError(code, err)
}

func procID(pid uint32) string { return "p" + strconv.FormatUint(uint64(pid), 10) }

func pidOf(id string) (uint32, bool) {
	n, err := strconv.ParseUint(strings.TrimPrefix(id, "p"), 10, 32)
	return uint32(n), err == nil && strings.HasPrefix(id, "p")
}

// selected resolves a process selector (pid or tag).
func (ps *processService) selected(id string, sel *pb.ProcessSelector) (string, error) {
	switch v := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		return procID(v.Pid), nil
	case *pb.ProcessSelector_Tag:
		ps.s.mu.Lock()
		pid, ok := ps.s.tags[id][v.Tag]
		ps.s.mu.Unlock()
		if !ok {
			return "", connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %s not found", errdefs.Quote(v.Tag)))
		}
		return procID(pid), nil
	}
	return "", connect.NewError(connect.CodeInvalidArgument, errors.New("process: give a pid or a tag"))
}

// keepalive is the interval the client asked keepalive events at (the
// Keepalive-Ping-Interval header, in seconds), 0 for none.
func keepalive(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}

func (ps *processService) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	id := sandboxOf(ctx)
	// E2B lists running processes only: from the manager's memory,
	// however many have ended in the sandbox.
	running, err := ps.s.m.RunningProcesses(ctx, id)
	if err != nil {
		return nil, rpcErr(err)
	}
	ps.s.mu.Lock()
	tagOf := map[uint32]string{}
	for t, pid := range ps.s.tags[id] {
		tagOf[pid] = t
	}
	ps.s.mu.Unlock()
	out := &pb.ListResponse{}
	for _, p := range running {
		pid, ok := pidOf(p.ID)
		if !ok || p.TTY && ps.s.terminal(id, p.ID) == nil {
			continue
		}
		info := &pb.ProcessInfo{Pid: pid, Config: processConfig(p)}
		if t, ok := tagOf[pid]; ok {
			info.Tag = &t
		}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

func processConfig(p api.Process) *pb.ProcessConfig {
	c := &pb.ProcessConfig{}
	if len(p.Argv) > 0 {
		c.Cmd, c.Args = p.Argv[0], p.Argv[1:]
	}
	if p.Cwd != "" {
		cwd := p.Cwd
		c.Cwd = &cwd
	}
	return c
}

func (ps *processService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	id := sandboxOf(ctx)
	m := req.Msg
	cfg := m.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd: empty"))
	}
	er := &api.ExecRequest{Argv: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Env: cfg.GetEnvs(), Cwd: cfg.GetCwd()}
	if dl, ok := ctx.Deadline(); ok {
		// As envd does, the call's timeout (Connect-Timeout-Ms, the SDK's
		// timeoutMs) is the process's: it is killed when it expires, in
		// the background too, not left running after the client gave up.
		er.TimeoutSeconds = min(max(time.Until(dl).Seconds(), 0.001), 9*365*24*3600)
	}
	if m.Pty != nil {
		var mu sync.Mutex
		return ps.startPTY(ctx, id, m, er, func(ev *pb.ProcessEvent) error {
			mu.Lock()
			defer mu.Unlock()
			return stream.Send(&pb.StartResponse{Event: ev})
		})
	}
	p, err := ps.s.m.Start(ctx, id, er)
	if err != nil {
		return rpcErr(err)
	}
	pid, _ := pidOf(p.ID)
	if m.Stdin != nil && !*m.Stdin {
		if err := ps.s.m.Stdin(ctx, id, p.ID, bytes.NewReader(nil), true); err != nil {
			ps.s.log.Warn("e2b: close stdin", "sandbox", id, "process", p.ID, "err", err)
		}
	}
	if m.Tag != nil {
		ps.s.setTag(ctx, id, *m.Tag, pid)
	}
	return ps.follow(ctx, id, p.ID, pid, keepalive(req.Header()), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	})
}

func (ps *processService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	id := sandboxOf(ctx)
	pidS, err := ps.selected(id, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	p, err := ps.s.m.Process(ctx, id, pidS)
	if err != nil {
		return rpcErr(err)
	}
	if p.TTY {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("process "+p.ID+" runs on a terminal: its output goes to the stream that started it"))
	}
	pid, _ := pidOf(p.ID)
	return ps.follow(ctx, id, p.ID, pid, keepalive(req.Header()), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	})
}

// follow sends a process's start, its output (from the first byte the
// daemon still holds), and its end.
func (ps *processService) follow(ctx context.Context, id, procID string, pid uint32, ka time.Duration, send func(*pb.ProcessEvent) error) error {
	var mu sync.Mutex
	emit := func(ev *pb.ProcessEvent) error {
		mu.Lock()
		defer mu.Unlock()
		return send(ev)
	}
	if err := emit(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: pid}}}); err != nil {
		return err
	}
	if ka > 0 {
		kctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			t := time.NewTicker(ka)
			defer t.Stop()
			for {
				select {
				case <-kctx.Done():
					return
				case <-t.C:
					if emit(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}) != nil {
						return
					}
				}
			}
		}()
	}
	// A command that ended but left a child holding its output open (`sleep
	// 1000 &`) ends the stream as envd's does, once its output has gone
	// quiet (or after endMax): the output follow alone would wait for the
	// child.
	octx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var last atomic.Int64 // when the last output event went out
	last.Store(time.Now().UnixNano())
	var sentEnd atomic.Bool
	go func() {
		if p, err := ps.s.m.Wait(octx, id, procID, 100*365*24*time.Hour); err != nil || p.EndedAt == nil {
			return
		}
		exited := time.Now()
		t := time.NewTicker(endQuiet / 5)
		defer t.Stop()
		for {
			select {
			case <-octx.Done():
				return
			case now := <-t.C:
				quietSince := max(last.Load(), exited.UnixNano())
				if now.Sub(exited) >= endMax || now.UnixNano()-quietSince >= int64(endQuiet) {
					stop(errEndedFirst)
					return
				}
			}
		}
	}()
	err := ps.s.m.Output(octx, id, procID, manager.Cursor{}, true, func(e api.OutputEvent) error {
		if e.Kind != api.EventExit {
			defer last.Store(time.Now().UnixNano())
		}
		switch e.Kind {
		case api.EventStdout:
			return emit(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: e.Data}}}})
		case api.EventStderr:
			return emit(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: e.Data}}}})
		case api.EventExit:
			sentEnd.Store(true)
			return emit(endEvent(e.ExitCode, e.Signal))
		}
		return nil // "lost": the bytes are gone; the stream goes on
	})
	if !sentEnd.Load() && errors.Is(context.Cause(octx), errEndedFirst) {
		p, perr := ps.s.m.Process(ctx, id, procID)
		if perr != nil {
			return rpcErr(perr)
		}
		return emit(endEvent(p.ExitCode, p.Signal))
	}
	return rpcErr(err)
}

// After a command ends, its stream ends once no output came for endQuiet,
// or endMax after the end whatever a child it left still writes.
const (
	endQuiet = 500 * time.Millisecond
	endMax   = 5 * time.Second
)

var errEndedFirst = errors.New("the process ended; a child it left holds its output")

// endEvent is the end of a process that exited with code, or was killed by
// signal sig.
func endEvent(code *int, sig int) *pb.ProcessEvent {
	end := &pb.ProcessEvent_EndEvent{Exited: true}
	switch {
	case sig != 0:
		end.ExitCode, end.Exited = -1, false
		end.Status = "signal: " + signalName(sig)
	case code != nil:
		end.ExitCode = int32(*code)
		end.Status = "exit status " + strconv.Itoa(*code)
	}
	if end.ExitCode != 0 {
		// envd's error is the wait's ("exit status 3", "signal: killed"):
		// the SDKs' CommandExitError message.
		msg := end.Status
		end.Error = &msg
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}
}

func signalName(n int) string {
	switch n {
	case 9:
		return "killed"
	case 15:
		return "terminated"
	case 2:
		return "interrupt"
	}
	return "signal " + strconv.Itoa(n)
}

func (ps *processService) input(ctx context.Context, id string, sel *pb.ProcessSelector, in *pb.ProcessInput) error {
	pidS, err := ps.selected(id, sel)
	if err != nil {
		return err
	}
	if v, ok := in.GetInput().(*pb.ProcessInput_Pty); ok {
		t := ps.s.terminal(id, pidS)
		if t == nil {
			return connect.NewError(connect.CodeNotFound, errors.New("no terminal of process "+pidS+" is open"))
		}
		_, err := t.master.Write(v.Pty)
		return rpcErr(err)
	}
	return ps.actErr(ctx, id, pidS, ps.s.m.Stdin(ctx, id, pidS, bytes.NewReader(in.GetStdin()), false))
}

// actErr is rpcErr for an action on a process: on one that has ended it is
// NotFound, as envd answers (it forgets a process once it ends), so that
// the SDKs' kill() returns false instead of throwing.
func (ps *processService) actErr(ctx context.Context, id, pidS string, err error) error {
	if err == nil {
		return nil
	}
	if status(err) == http.StatusConflict {
		if p, perr := ps.s.m.Process(ctx, id, pidS); perr == nil && p.EndedAt != nil {
			return connect.NewError(connect.CodeNotFound, fmt.Errorf("process %s has ended", pidS))
		}
	}
	return rpcErr(err)
}

func (ps *processService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	if err := ps.input(ctx, sandboxOf(ctx), req.Msg.GetProcess(), req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func (ps *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	id := sandboxOf(ctx)
	var sel *pb.ProcessSelector
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			sel = ev.Start.GetProcess()
		case *pb.StreamInputRequest_Data:
			if sel == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input before the start event naming the process"))
			}
			if err := ps.input(ctx, id, sel, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func (ps *processService) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	id := sandboxOf(ctx)
	pidS, err := ps.selected(id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig string
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = "KILL"
	case pb.Signal_SIGNAL_SIGTERM:
		sig = "TERM"
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %d: want SIGKILL or SIGTERM", req.Msg.GetSignal()))
	}
	if err := ps.s.m.Signal(ctx, id, pidS, sig); err != nil {
		return nil, ps.actErr(ctx, id, pidS, err)
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

func (ps *processService) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	id := sandboxOf(ctx)
	pidS, err := ps.selected(id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := ps.s.m.Stdin(ctx, id, pidS, bytes.NewReader(nil), true); err != nil {
		return nil, ps.actErr(ctx, id, pidS, err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// pruneTags forgets the tags of sandboxes that are gone.
func (s *Server) pruneTags(ctx context.Context) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.tags))
	for id := range s.tags {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		if sb, err := s.m.Get(ctx, id); errors.Is(err, errdefs.ErrNotFound) || err == nil && (sb.State == api.StateStopped || sb.State == api.StateFailed) {
			s.mu.Lock()
			delete(s.tags, id)
			s.mu.Unlock()
		}
	}
}

// setTag names a process of a sandbox by a tag.
func (s *Server) setTag(ctx context.Context, id, tag string, pid uint32) {
	s.pruneTags(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tags[id] == nil {
		s.tags[id] = map[string]uint32{}
	}
	s.tags[id][tag] = pid
}
