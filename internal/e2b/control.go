package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/manager"
)

// DefaultTimeout is the lifetime of a sandbox created without one (E2B's).
const DefaultTimeout = 15 * time.Second

// isControlPath says whether a path belongs to E2B's control plane; none
// of them collides with airlock's /v1.
func isControlPath(p string) bool {
	for _, pre := range []string{"/sandboxes", "/v2/sandboxes", "/v3/templates", "/v2/templates", "/templates", "/snapshots", "/volumes", "/volumecontent", "/secrets", "/teams", "/nodes"} {
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

// newSandbox is E2B's create body. Fields airlock does not serve are kept
// as raw JSON so that a request asking for them is refused, not ignored.
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          json.RawMessage   `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	Network             json.RawMessage   `json:"network"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
}

// sandboxCreated is E2B's Sandbox document (create, connect, resume).
type sandboxCreated struct {
	TemplateID      string `json:"templateID"`
	SandboxID       string `json:"sandboxID"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
	Domain          string `json:"domain,omitempty"`
}

// listedSandbox is E2B's ListedSandbox and SandboxDetail.
type listedSandbox struct {
	TemplateID          string            `json:"templateID"`
	SandboxID           string            `json:"sandboxID"`
	ClientID            string            `json:"clientID"`
	StartedAt           time.Time         `json:"startedAt"`
	EndAt               time.Time         `json:"endAt"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int               `json:"memoryMB"`
	DiskSizeMB          int               `json:"diskSizeMB"`
	Metadata            map[string]string `json:"metadata"`
	State               string            `json:"state"`
	EnvdVersion         string            `json:"envdVersion"`
	EnvdAccessToken     string            `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool             `json:"allowInternetAccess,omitempty"`
	Domain              string            `json:"domain,omitempty"`
	VolumeMounts        []any             `json:"volumeMounts"`
}

// ctlError is a control-plane error with its status.
type ctlError struct {
	status int
	msg    string
}

func (e *ctlError) Error() string { return e.msg }

func ctlErr(status int, format string, args ...any) error {
	return &ctlError{status, fmt.Sprintf(format, args...)}
}

// serveControl serves E2B's control plane.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusWriter{ResponseWriter: w}
	var err error
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("internal error: %v", p)
			s.log.Error("panic in E2B control plane", "panic", p)
			if rec.status == 0 {
				writeErr(rec, http.StatusInternalServerError, "internal error")
			}
		}
		level := slog.LevelDebug
		if rec.status >= 400 {
			level = slog.LevelInfo
		}
		attrs := []any{"method", r.Method, "path", r.URL.Path, "status", rec.status, "ms", float64(time.Since(start).Microseconds()) / 1000}
		if err != nil {
			attrs = append(attrs, "err", err)
		}
		s.log.Log(r.Context(), level, "e2b request", attrs...)
	}()
	key := apiKey(r)
	k := s.auth(r.Context(), key)
	if key == "" {
		err = ctlErr(http.StatusUnauthorized, "an API key is required: send X-API-Key (make one with `airlock keys create`)")
	} else if k == nil {
		err = ctlErr(http.StatusUnauthorized, "invalid or revoked API key")
	} else if s.ready(rec, r) {
		// A tenant's key: its creations are its tenant's, and any other
		// sandbox is not found.
		err = s.route(rec, r.WithContext(manager.WithTenant(r.Context(), k.Tenant)))
	} else {
		return
	}
	if err != nil && rec.status == 0 {
		var ce *ctlError
		if errors.As(err, &ce) {
			writeErr(rec, ce.status, ce.msg)
		} else {
			writeErr(rec, status(err), err.Error())
		}
	}
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) error {
	p := strings.TrimSuffix(r.URL.Path, "/")
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	v2 := false
	if parts[0] == "v2" && len(parts) > 1 && parts[1] == "sandboxes" {
		v2, parts = true, parts[1:]
	}
	if parts[0] != "sandboxes" {
		return ctlErr(http.StatusNotImplemented, "%s %s: templates, snapshots, volumes, secrets and teams are not served by airlock (templates are the daemon's named policies and images)", r.Method, r.URL.Path)
	}
	method := r.Method
	switch {
	case len(parts) == 1 && method == http.MethodPost:
		return s.create(w, r)
	case len(parts) == 1 && method == http.MethodGet:
		return s.list(w, r, v2)
	case len(parts) == 1:
		return ctlErr(http.StatusMethodNotAllowed, "%s %s: method not allowed", method, r.URL.Path)
	}
	id := parts[1]
	if err := s.m.CheckTenant(r.Context(), id); err != nil {
		return sandboxErr(id, err)
	}
	switch {
	case len(parts) == 2 && method == http.MethodGet && !v2:
		return s.get(w, r, id)
	case len(parts) == 2 && method == http.MethodDelete && !v2:
		if err := s.m.Delete(r.Context(), id); err != nil {
			return sandboxErr(id, err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	case len(parts) == 3:
		switch parts[2] {
		case "timeout", "refreshes":
			if method != http.MethodPost {
				break
			}
			return s.setTimeout(w, r, id, parts[2])
		case "pause":
			if method != http.MethodPost || v2 {
				break
			}
			if _, err := s.m.Pause(r.Context(), id); err != nil {
				return sandboxErr(id, err)
			}
			w.WriteHeader(http.StatusNoContent)
			return nil
		case "resume", "connect":
			if method != http.MethodPost || (v2 && parts[2] == "resume") {
				break
			}
			return s.connect(w, r, id, parts[2] == "resume")
		case "metrics", "logs", "snapshots", "fork", "network":
			return ctlErr(http.StatusNotImplemented, "%s %s: not served by airlock (see the README's E2B compatibility section; airlock's /v1 has network policy and audit)", method, r.URL.Path)
		}
	}
	return ctlErr(http.StatusNotFound, "%s %s: no such E2B API path", method, r.URL.Path)
}

// sandboxErr turns an airlock error about a sandbox into E2B's: a final
// sandbox and an unknown one are both "not found", as in E2B.
func sandboxErr(id string, err error) error {
	if errors.Is(err, errdefs.ErrNotFound) {
		return ctlErr(http.StatusNotFound, "sandbox %s not found", errdefs.Quote(id))
	}
	return err
}

// decode reads a JSON body (at most 1 MiB; an empty body is {}).
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		return ctlErr(http.StatusBadRequest, "reading the body: %v", err)
	}
	if len(b) > 1<<20 {
		return ctlErr(http.StatusRequestEntityTooLarge, "body larger than 1 MiB")
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return ctlErr(http.StatusBadRequest, "body: %v", errdefs.Clip(err.Error()))
	}
	return nil
}

func present(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) error {
	var req newSandbox
	if err := decode(r, &req); err != nil {
		return err
	}
	switch {
	case req.AutoPause != nil && *req.AutoPause:
		return ctlErr(http.StatusNotImplemented, "autoPause: not served by airlock (a sandbox is killed at its timeout)")
	case present(req.AutoResume):
		return ctlErr(http.StatusNotImplemented, "autoResume: not served by airlock")
	case present(req.Network):
		return ctlErr(http.StatusNotImplemented, "network: per-sandbox rules at create are not served through the E2B API; use a template (an airlock policy) with the rules, or airlock's /v1 network policy")
	case present(req.MCP):
		return ctlErr(http.StatusNotImplemented, "mcp: not served by airlock")
	case present(req.IAM):
		return ctlErr(http.StatusNotImplemented, "iam: not served by airlock")
	case present(req.VolumeMounts) && strings.TrimSpace(string(req.VolumeMounts)) != "[]":
		return ctlErr(http.StatusNotImplemented, "volumeMounts: not served by airlock")
	}
	pol, img, ok := s.m.Template(req.TemplateID)
	if !ok {
		return ctlErr(http.StatusNotFound, "template %s not found (templates are the daemon's named policies and images, and base)", errdefs.Quote(req.TemplateID))
	}
	timeout := DefaultTimeout.Seconds()
	if req.Timeout != nil {
		if *req.Timeout <= 0 {
			return ctlErr(http.StatusBadRequest, "timeout %d: want a positive number of seconds", *req.Timeout)
		}
		timeout = float64(*req.Timeout)
	}
	sb, err := s.m.Create(r.Context(), &api.CreateSandboxRequest{
		PolicyName: pol, Image: img, Env: req.EnvVars, Labels: req.Metadata,
		TimeoutSeconds: timeout, IdleTimeoutSeconds: -1,
	})
	if err != nil {
		return err
	}
	if err := s.applyInternet(r.Context(), sb.ID, req.AllowInternetAccess); err != nil {
		// Fail closed: a sandbox whose network is not what was asked for
		// is not handed out.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
		defer cancel()
		if derr := s.m.Delete(dctx, sb.ID); derr != nil {
			s.log.Error("e2b: delete a sandbox whose network could not be set", "sandbox", sb.ID, "err", derr)
		}
		return err
	}
	writeJSON(w, http.StatusCreated, s.created(sb))
	return nil
}

// applyInternet honours allow_internet_access: false denies every
// destination; true needs a template whose policy has network.
func (s *Server) applyInternet(ctx context.Context, id string, allow *bool) error {
	if allow == nil {
		return nil
	}
	np, err := s.m.NetworkPolicy(ctx, id)
	if err != nil {
		return err
	}
	if *allow {
		if np.Mode == "none" {
			return ctlErr(http.StatusBadRequest, "allow_internet_access: true, but the template's policy has no network (use a template whose airlock policy allows the hosts it needs)")
		}
		return nil
	}
	if np.Mode == "none" {
		return nil
	}
	_, err = s.m.SetNetworkPolicy(ctx, id, api.NetworkPolicy{Mode: "none"})
	return err
}

func templateOf(sb api.Sandbox) string {
	switch {
	case sb.Policy != "" && sb.Policy != "inline":
		return sb.Policy
	case sb.Image != "":
		return sb.Image
	}
	return "base"
}

func (s *Server) created(sb api.Sandbox) sandboxCreated {
	return sandboxCreated{TemplateID: templateOf(sb), SandboxID: sb.ID, ClientID: "airlock",
		EnvdVersion: EnvdVersion, EnvdAccessToken: s.Token(sb.ID), Domain: s.Domain}
}

func (s *Server) listed(sb api.Sandbox) listedSandbox {
	end := time.Time{}
	if sb.ExpiresAt != nil {
		end = *sb.ExpiresAt
	}
	md := sb.Labels
	if md == nil {
		md = map[string]string{}
	}
	st := sb.State
	if st == api.StateCreating {
		st = api.StateRunning
	}
	return listedSandbox{TemplateID: templateOf(sb), SandboxID: sb.ID, ClientID: "airlock", StartedAt: sb.CreatedAt,
		EndAt: end, CPUCount: int(max(1, sb.Resources.CPU)), MemoryMB: 0, Metadata: md, State: st,
		EnvdVersion: EnvdVersion, Domain: s.Domain, VolumeMounts: []any{}}
}

// live returns a sandbox that is not final (E2B forgets killed sandboxes).
func (s *Server) live(ctx context.Context, id string) (api.Sandbox, error) {
	sb, err := s.m.Get(ctx, id)
	if err != nil {
		return api.Sandbox{}, sandboxErr(id, err)
	}
	if sb.State == api.StateStopped || sb.State == api.StateFailed {
		return api.Sandbox{}, ctlErr(http.StatusNotFound, "sandbox %s not found (it is %s)", errdefs.Quote(id), sb.State)
	}
	return sb, nil
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, id string) error {
	sb, err := s.live(r.Context(), id)
	if err != nil {
		return err
	}
	d := s.listed(sb)
	d.EnvdAccessToken = s.Token(sb.ID)
	if np, err := s.m.NetworkPolicy(r.Context(), id); err == nil {
		allow := np.Mode != "none"
		d.AllowInternetAccess = &allow
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, id, kind string) error {
	var body struct {
		Timeout  *int64 `json:"timeout"`
		Duration *int64 `json:"duration"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	v := body.Timeout
	if kind == "refreshes" {
		v = body.Duration
		if v == nil {
			d := int64(DefaultTimeout.Seconds())
			v = &d
		}
	}
	if v == nil || *v <= 0 {
		return ctlErr(http.StatusBadRequest, "%s: want a positive number of seconds", map[string]string{"timeout": "timeout", "refreshes": "duration"}[kind])
	}
	if _, err := s.live(r.Context(), id); err != nil {
		return err
	}
	if _, err := s.m.SetTimeout(r.Context(), id, float64(*v)); err != nil {
		return sandboxErr(id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connect resumes a paused sandbox (201) or returns a running one (200),
// extending its timeout when one is given.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, id string, resumeOnly bool) error {
	var body struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Timeout != nil && *body.Timeout <= 0 {
		return ctlErr(http.StatusBadRequest, "timeout %d: want a positive number of seconds", *body.Timeout)
	}
	sb, err := s.live(r.Context(), id)
	if err != nil {
		return err
	}
	code := http.StatusOK
	switch sb.State {
	case api.StatePaused:
		if sb, err = s.m.Resume(r.Context(), id); err != nil {
			return sandboxErr(id, err)
		}
		code = http.StatusCreated
	case api.StateRunning:
		if resumeOnly {
			return ctlErr(http.StatusConflict, "sandbox %s is already running", errdefs.Quote(id))
		}
	default:
		return ctlErr(http.StatusConflict, "sandbox %s is %s", errdefs.Quote(id), sb.State)
	}
	if body.Timeout != nil {
		if *body.Timeout > int64(math.MaxInt64/int64(time.Second)) {
			// Past what a time.Duration holds (it would wrap to the
			// past): the daemon says how long a timeout may be.
			if _, err := s.m.SetTimeout(r.Context(), id, float64(*body.Timeout)); err != nil {
				return sandboxErr(id, err)
			}
		}
		exp := time.Now().Add(time.Duration(*body.Timeout) * time.Second)
		if sb.ExpiresAt == nil || exp.After(*sb.ExpiresAt) {
			if sb, err = s.m.SetTimeout(r.Context(), id, float64(*body.Timeout)); err != nil {
				return sandboxErr(id, err)
			}
		}
	}
	writeJSON(w, code, s.created(sb))
	return nil
}

// list serves GET /sandboxes (every running and paused sandbox) and GET
// /v2/sandboxes (state, order, limit and nextToken paging).
func (s *Server) list(w http.ResponseWriter, r *http.Request, v2 bool) error {
	q := r.URL.Query()
	labels, err := parseMetadata(q.Get("metadata"))
	if err != nil {
		return err
	}
	states := map[string]bool{api.StateRunning: true, api.StatePaused: true}
	limit, order := 0, "asc"
	var after *pageKey
	if v2 {
		if v := q["state"]; len(v) > 0 {
			states = map[string]bool{}
			for _, x := range v {
				for _, st := range strings.Split(x, ",") {
					switch st {
					case "running", "paused":
						states[st] = true
					default:
						return ctlErr(http.StatusBadRequest, "state %s: want running or paused", errdefs.Quote(st))
					}
				}
			}
		}
		limit = 100
		if v := q.Get("limit"); v != "" {
			if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 1000 {
				return ctlErr(http.StatusBadRequest, "limit %s: want 1 to 1000", errdefs.Quote(v))
			}
		}
		switch o := q.Get("order"); o {
		case "", "asc":
		case "desc":
			order = "desc"
		default:
			return ctlErr(http.StatusBadRequest, "order %s: want asc or desc", errdefs.Quote(o))
		}
		if t := q.Get("nextToken"); t != "" {
			k, err := parsePageKey(t)
			if err != nil {
				return err
			}
			after = &k
		}
	}
	var all []api.Sandbox
	cursor := ""
	for range 1000 { // pages of 1000: a million sandboxes at most
		page, err := s.m.List(r.Context(), manager.ListOptions{Labels: labels, States: []string{api.StateCreating, api.StateRunning, api.StatePaused}, Limit: 1000, Cursor: cursor})
		if err != nil {
			return err
		}
		all = append(all, page.Sandboxes...)
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	out := make([]listedSandbox, 0, len(all))
	for _, sb := range all {
		ls := s.listed(sb)
		if states[ls.State] {
			out = append(out, ls)
		}
	}
	less := func(a, b pageKey) bool {
		if !a.t.Equal(b.t) {
			return a.t.Before(b.t)
		}
		return a.id < b.id
	}
	keyOf := func(l listedSandbox) pageKey { return pageKey{l.StartedAt, l.SandboxID} }
	sort.Slice(out, func(i, j int) bool {
		if order == "desc" {
			return less(keyOf(out[j]), keyOf(out[i]))
		}
		return less(keyOf(out[i]), keyOf(out[j]))
	})
	if after != nil {
		i := sort.Search(len(out), func(i int) bool {
			if order == "desc" {
				return less(keyOf(out[i]), *after)
			}
			return less(*after, keyOf(out[i]))
		})
		out = out[i:]
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
		w.Header().Set("X-Next-Token", keyOf(out[limit-1]).String())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// parseMetadata parses the metadata filter: a query string of key=value
// pairs (each URL-encoded once more by the SDK).
func parseMetadata(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(v)
	if err != nil {
		return nil, ctlErr(http.StatusBadRequest, "metadata %s: want key=value pairs joined with &", errdefs.Quote(v))
	}
	out := map[string]string{}
	for k, vs := range vals {
		kk, err1 := url.QueryUnescape(k)
		vv, err2 := url.QueryUnescape(vs[len(vs)-1])
		if err1 != nil || err2 != nil {
			return nil, ctlErr(http.StatusBadRequest, "metadata %s: bad encoding", errdefs.Quote(v))
		}
		out[kk] = vv
	}
	return out, nil
}

// pageKey is where a page of a list ends: the last sandbox's start and id.
type pageKey struct {
	t  time.Time
	id string
}

func (k pageKey) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.t.UnixNano(), 10) + ":" + k.id))
}

func parsePageKey(s string) (pageKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		ns, id, ok := strings.Cut(string(b), ":")
		n, perr := strconv.ParseInt(ns, 10, 64)
		if ok && perr == nil {
			return pageKey{time.Unix(0, n).UTC(), id}, nil
		}
	}
	return pageKey{}, ctlErr(http.StatusBadRequest, "nextToken %s: not a token this daemon gave out", errdefs.Quote(s))
}
