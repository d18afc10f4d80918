package server

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/manager"
)

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateSandboxRequest
	if err := decode(w, r, maxCreateJSON, &req); err != nil {
		return err
	}
	sb, err := s.m.Create(r.Context(), &req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, sb)
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	o := manager.ListOptions{States: q["state"], Cursor: q.Get("cursor")}
	for _, l := range q["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return badRequest("label=%s: want key=value", errdefs.Quote(l))
		}
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		o.Labels[k] = v
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return badRequest("limit=%s: want 1 to 1000", errdefs.Quote(v))
		}
		o.Limit = n
	}
	list, err := s.m.List(r.Context(), o)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, list)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	sb, err := s.m.Get(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	if err := s.m.Delete(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.TimeoutRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		return err
	}
	sb, err := s.m.SetTimeout(r.Context(), id, req.TimeoutSeconds)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
}

func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	sb, err := s.m.Pause(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	sb, err := s.m.Resume(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateKeyRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		return err
	}
	if len(req.Name) > 256 || strings.ContainsAny(req.Name, "\x00\n") {
		return badRequest("name: up to 256 bytes on one line")
	}
	if err := checkTenantName(req.Tenant); err != nil {
		return err
	}
	secret, k, err := s.st.CreateTenantKey(r.Context(), req.Name, req.Tenant)
	if err != nil {
		return err
	}
	v := keyView(k)
	v.Key = secret
	return writeJSON(w, http.StatusCreated, v)
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	keys, err := s.st.ListKeys(r.Context())
	if err != nil {
		return err
	}
	out := api.KeyList{Keys: make([]api.APIKey, 0, len(keys))}
	for _, k := range keys {
		out.Keys = append(out.Keys, keyView(k))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	if err := s.st.RevokeKey(r.Context(), r.PathValue("kid")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkTenantName validates a tenant's name: 1 to 64 letters, digits, '-',
// '_' and '.' ("" is no tenant).
func checkTenantName(t string) error {
	if len(t) > 64 {
		return badRequest("tenant: %d bytes, the most is 64", len(t))
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return badRequest("tenant %s: want letters, digits, '-', '_' and '.'", errdefs.Quote(t))
		}
	}
	return nil
}
