package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/store"
)

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errdefs.ErrInvalid)
}

// decode reads a JSON body strictly (unknown fields are errors), at most
// limit bytes.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return badRequest("request body: empty, want a JSON object")
		}
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			if n, uerr := strconv.Unquote(name); uerr == nil {
				name = n
			}
			return badRequest("request body: unknown field %s", errdefs.Quote(name))
		}
		return badRequest("request body: %v", err)
	}
	if dec.More() {
		return badRequest("request body: more than one JSON value")
	}
	return nil
}

var (
	sandboxIDRe = regexp.MustCompile(`^sb-[0-9a-f]{16}$`)
	procIDRe    = regexp.MustCompile(`^p[1-9][0-9]{0,18}$`)
)

// sandboxID returns the {id} path value, or a 404 for anything that is
// not a sandbox id.
func sandboxID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !sandboxIDRe.MatchString(id) {
		return "", fmt.Errorf("sandbox %s: not a sandbox id (sb- and 16 hex digits): %w", errdefs.Quote(id), errdefs.ErrNotFound)
	}
	return id, nil
}

// processID returns the {pid} path value.
func processID(r *http.Request) (string, error) {
	pid := r.PathValue("pid")
	if !procIDRe.MatchString(pid) {
		return "", fmt.Errorf("process %s: not a process id (p1, p2, ...): %w", errdefs.Quote(pid), errdefs.ErrNotFound)
	}
	return pid, nil
}

// processIDs returns the {id} and {pid} path values.
func processIDs(r *http.Request) (id, pid string, err error) {
	if id, err = sandboxID(r); err != nil {
		return "", "", err
	}
	pid, err = processID(r)
	return id, pid, err
}

// boolParam parses an optional boolean query parameter.
func boolParam(r *http.Request, name string, def bool) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("%s=%s: want true or false", name, errdefs.Quote(v))
	}
	return b, nil
}

// secondsParam parses an optional number of seconds in [0, max].
func secondsParam(r *http.Request, name string, def, max time.Duration) (time.Duration, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f != f {
		return 0, badRequest("%s=%s: want a number of seconds, not negative", name, errdefs.Quote(v))
	}
	if f*float64(time.Second) >= float64(max) { // also where time.Duration would overflow
		return max, nil
	}
	return time.Duration(f * float64(time.Second)), nil
}

// keyView is the API's picture of a key (never its secret).
func keyView(k *store.Key) api.APIKey {
	return api.APIKey{ID: k.ID, Name: k.Name, Tenant: k.Tenant, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt, LastUsed: k.LastUsed}
}
