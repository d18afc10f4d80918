package server

import (
	"encoding/json"
	"net/http"
	"strings"
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
	list, err := s.m.Processes(r.Context(), id)
	if err != nil {
		return err
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
	sse := strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	c := r.URL.Query().Get("cursor")
	if c == "" && sse {
		c = r.Header.Get("Last-Event-ID")
	}
	cur, err := manager.ParseCursor(c)
	if err != nil {
		return err
	}
	follow, err := boolParam(r, "follow", true)
	if err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Time{})
	started := false
	// start sends the status and headers, once, before the first event.
	start := func() {
		if started {
			return
		}
		started = true
		if sse {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
		} else {
			w.Header().Set("Content-Type", "application/x-ndjson")
		}
		w.Header().Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
	}
	emit := func(ev api.OutputEvent) error {
		start()
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if sse {
			_, err = w.Write([]byte("id: " + ev.Cursor + "\nevent: " + ev.Kind + "\ndata: "))
			if err == nil {
				_, err = w.Write(append(b, '\n', '\n'))
			}
		} else {
			_, err = w.Write(append(b, '\n'))
		}
		if err != nil {
			return err
		}
		return rc.Flush()
	}
	err = s.m.Output(r.Context(), id, pid, cur, follow, emit)
	if err != nil && started && r.Context().Err() == nil {
		// The status went out already: the error is the stream's last
		// line, in the one error shape, so the client can tell it from an
		// end.
		b, _ := json.Marshal(api.Error{Err: api.ErrorBody{Code: api.CodeInternal, Message: err.Error()}})
		if sse {
			w.Write([]byte("event: error\ndata: " + string(b) + "\n\n"))
		} else {
			w.Write(append(b, '\n'))
		}
		rc.Flush()
		return err
	}
	if err == nil {
		start() // nothing new and the process still runs (follow=false)
	}
	return err
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
