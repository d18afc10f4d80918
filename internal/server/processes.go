package server

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/manager"
)

func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.ExecRequest
	if err := decode(w, r, maxCreateJSON, &req); err != nil {
		return err
	}
	res, err := s.m.Exec(r.Context(), id, &req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.ExecRequest
	if err := decode(w, r, maxCreateJSON, &req); err != nil {
		return err
	}
	if req.MaxOutputBytes != 0 {
		return badRequest("max_output_bytes: only for exec (a background process's output is streamed)")
	}
	p, err := s.m.Start(r.Context(), id, &req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, p)
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var list api.ProcessList
	switch state := r.URL.Query().Get("state"); state {
	case "":
		list, err = s.m.Processes(r.Context(), id)
	case api.ProcessRunning:
		list.Processes, err = s.m.RunningProcesses(r.Context(), id)
	case api.ProcessExited:
		list, err = s.m.Processes(r.Context(), id)
		list.Processes = slices.DeleteFunc(list.Processes, func(p api.Process) bool { return p.State != api.ProcessExited })
	default:
		return badRequest("state %q: want %s or %s", state, api.ProcessRunning, api.ProcessExited)
	}
	if err != nil {
		return err
	}
	if list.Processes == nil {
		list.Processes = []api.Process{}
	}
	return writeJSON(w, http.StatusOK, list)
}

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request) error {
	id, pid, err := processIDs(r)
	if err != nil {
		return err
	}
	p, err := s.m.Process(r.Context(), id, pid)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, p)
}

func (s *Server) waitProcess(w http.ResponseWriter, r *http.Request) error {
	id, pid, err := processIDs(r)
	if err != nil {
		return err
	}
	d, err := secondsParam(r, "timeout_seconds", 30*time.Second, 300*time.Second)
	if err != nil {
		return err
	}
	p, err := s.m.Wait(r.Context(), id, pid, d)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, p)
}

// processOutput streams output events as NDJSON or Server-Sent Events.
func (s *Server) processOutput(w http.ResponseWriter, r *http.Request) error {
	id, pid, err := processIDs(r)
	if err != nil {
		return err
	}
	st := newStream(w, r)
	cur, err := manager.ParseCursor(st.cursor(r))
	if err != nil {
		return err
	}
	follow, err := boolParam(r, "follow", true)
	if err != nil {
		return err
	}
	err = s.untilDrained(r, func(ctx context.Context) error {
		return s.m.Output(ctx, id, pid, cur, follow, func(ev api.OutputEvent) error {
			return st.send(ev.Cursor, ev.Kind, ev)
		})
	})
	return st.end(r.Context(), err)
}

func (s *Server) writeStdin(w http.ResponseWriter, r *http.Request) error {
	id, pid, err := processIDs(r)
	if err != nil {
		return err
	}
	closeAfter, err := boolParam(r, "close", false)
	if err != nil {
		return err
	}
	if err := s.m.Stdin(r.Context(), id, pid, r.Body, closeAfter); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request) error {
	id, pid, err := processIDs(r)
	if err != nil {
		return err
	}
	var req api.SignalRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		return err
	}
	if err := s.m.Signal(r.Context(), id, pid, req.Signal); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
