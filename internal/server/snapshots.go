package server

import (
	"net/http"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
)

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.CreateSnapshotRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		return err
	}
	sn, err := s.m.CreateSnapshot(r.Context(), id, &req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, sn)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	list, err := s.m.ListSnapshots(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, list)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	sn, err := s.m.GetSnapshot(r.Context(), r.PathValue("snap"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sn)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	if err := s.m.DeleteSnapshot(r.Context(), r.PathValue("snap")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.ForkRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		return err
	}
	res, err := s.m.Fork(r.Context(), id, &req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, res)
}

func (s *Server) restoreSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.RestoreRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		return err
	}
	if req.Snapshot == "" {
		return badRequest("snapshot: required")
	}
	sb, err := s.m.Restore(r.Context(), id, &req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
}

func (s *Server) sandboxChanges(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	diff := false
	switch v := q.Get("diff"); v {
	case "", "false":
	case "true":
		diff = true
	default:
		return badRequest("diff=%s: want true or false", errdefs.Quote(v))
	}
	ch, err := s.m.Changes(r.Context(), id, q.Get("since"), diff)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ch)
}
