package e2b

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/airlock-dev/airlock/internal/e2b/proto/filesystem/filesystempbconnect"
	"github.com/airlock-dev/airlock/internal/e2b/proto/process/processpbconnect"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/manager"
)

// maxRPCMessage bounds one Connect message (a malformed length prefix
// cannot make the daemon allocate more).
const maxRPCMessage = 4 << 20

// compressMin is the smallest Connect message sent gzipped to a client
// that accepts it. Below it compression costs both ends more than the
// bytes it saves: the SDKs' fetch asks for gzip on every call, and most
// answers (a stat, an empty reply, a process event) are a few hundred
// bytes.
const compressMin = 16 << 10

// envdHandler serves envd: the Connect services, /files and /health. The
// sandbox id is in the request's context.
func (s *Server) envdHandler() http.Handler {
	mux := http.NewServeMux()
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(maxRPCMessage), connect.WithCompressMinBytes(compressMin)}
	mux.Handle(processpbconnect.NewProcessHandler(&processService{s}, opts...))
	mux.Handle(filesystempbconnect.NewFilesystemHandler(&fsService{s}, opts...))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.m.Files(r.Context(), sandboxOf(r.Context())); err != nil {
			writeErr(w, status(err), err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /files", s.download)
	mux.HandleFunc("POST /files", s.upload)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("%s %s: not served by airlock's envd", r.Method, r.URL.Path))
	})
	return mux
}

// writtenEntry is envd's answer for each file written.
type writtenEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	p := home(r.URL.Query().Get("path"))
	if err := manager.CheckPath("path", p); err != nil {
		writeErr(w, status(err), err.Error())
		return
	}
	fsys, err := s.m.Files(r.Context(), sandboxOf(r.Context()))
	if err != nil {
		writeErr(w, status(err), err.Error())
		return
	}
	rc, fi, err := fsys.ReadFile(r.Context(), p)
	if err != nil {
		writeErr(w, status(err), err.Error())
		return
	}
	defer rc.Close()
	if fi.Dir {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("path %s is a directory", errdefs.Quote(p)))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	if fi.Size > 0 {
		// A size of 0 may be a file of /proc, whose content only a read
		// finds: no length then, the body is what the read gives.
		w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		s.log.Debug("e2b: download cut", "path", p, "err", err)
	}
}

// upload writes the files of a multipart form (field "file"; the path is
// ?path= or the part's file name) or the octet-stream body at ?path=.
// Each file is replaced only by a complete stream: a body cut short or
// over the cap leaves the previous file in place.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := home(r.URL.Query().Get("path"))
	fsys, err := s.m.Files(ctx, sandboxOf(ctx))
	if err != nil {
		writeErr(w, status(err), err.Error())
		return
	}
	if s.MaxUpload > 0 {
		r.Body = http.MaxBytesReader(w, r.Body, s.MaxUpload)
	}
	fail := func(err error) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeErr(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("upload larger than the daemon's max_upload (%d bytes)", mbe.Limit))
			return
		}
		writeErr(w, status(err), err.Error())
	}
	write := func(p string, body io.Reader) (writtenEntry, error) {
		if err := manager.CheckPath("path", p); err != nil {
			return writtenEntry{}, err
		}
		if dir := path.Dir(p); dir != "." && dir != "/" {
			if err := fsys.MkdirAll(ctx, dir, 0o755); err != nil {
				return writtenEntry{}, err
			}
		}
		if err := fsys.WriteFile(ctx, p, 0o644, body); err != nil {
			return writtenEntry{}, err
		}
		return writtenEntry{Name: path.Base(p), Type: "file", Path: absPath(p)}, nil
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []writtenEntry
	if ct != "multipart/form-data" {
		if ct != "application/octet-stream" && ct != "" {
			writeErr(w, http.StatusBadRequest, fmt.Sprintf("Content-Type %s: want multipart/form-data or application/octet-stream", errdefs.Quote(ct)))
			return
		}
		body := io.Reader(r.Body)
		switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
		case "", "identity":
		case "gzip":
			// The SDK's files.write(..., {gzip: true}). max_upload caps
			// what is written, decompressed.
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				writeErr(w, http.StatusBadRequest, "Content-Encoding: gzip: "+err.Error())
				return
			}
			body = zr
			if s.MaxUpload > 0 {
				body = &capReader{r: zr, left: s.MaxUpload, limit: s.MaxUpload}
			}
		default:
			writeErr(w, http.StatusBadRequest, fmt.Sprintf("Content-Encoding %s: want gzip or none", errdefs.Quote(enc)))
			return
		}
		e, err := write(q, body)
		if err != nil {
			fail(err)
			return
		}
		writeJSON(w, http.StatusOK, []writtenEntry{e})
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		writeErr(w, http.StatusBadRequest, "multipart body: "+err.Error())
		return
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail(fmt.Errorf("multipart body: %v: %w", err, errdefs.ErrInvalid))
			return
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		p := q
		if p == "" {
			p = home(partFileName(part))
		}
		e, err := write(p, part)
		part.Close()
		if err != nil {
			fail(err)
			return
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		writeErr(w, http.StatusBadRequest, "multipart body: no part named file")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// partFileName is a multipart part's filename as the client sent it: the
// SDK names each file of a multi-file write by its path in the sandbox
// (part.FileName keeps only the last element).
func partFileName(part *multipart.Part) string {
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// capReader fails with an *http.MaxBytesError once more than limit bytes
// were read (a decompressed upload past max_upload).
type capReader struct {
	r           io.Reader
	left, limit int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte more tells a stream that ends exactly at the cap.
		var b [1]byte
		if n, _ := c.r.Read(b[:]); n > 0 {
			return 0, &http.MaxBytesError{Limit: c.limit}
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
