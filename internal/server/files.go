package server

import (
	"io"
	"net/http"
	"os"
	"path"
	"strconv"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/manager"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// files returns the sandbox's file operations and the ?path= parameter.
func (s *Server) files(r *http.Request) (runtime.Files, string, error) {
	id, err := sandboxID(r)
	if err != nil {
		return nil, "", err
	}
	p := r.URL.Query().Get("path")
	if err := manager.CheckPath("path", p); err != nil {
		return nil, "", err
	}
	fs, err := s.m.Files(r.Context(), id)
	return fs, p, err
}

func fileView(fi runtime.FileInfo, p string) api.FileInfo {
	return api.FileInfo{Name: fi.Name, Path: p, Size: fi.Size, Mode: uint32(fi.Mode.Perm()), Dir: fi.Dir, Link: fi.Link, ModTime: fi.ModTime.UTC()}
}

// body caps an upload body.
func (s *Server) body(w http.ResponseWriter, r *http.Request) io.Reader {
	if s.MaxUpload > 0 {
		return http.MaxBytesReader(w, r.Body, s.MaxUpload)
	}
	return r.Body
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) error {
	fs, p, err := s.files(r)
	if err != nil {
		return err
	}
	rc, fi, err := fs.ReadFile(r.Context(), p)
	if err != nil {
		return err
	}
	defer rc.Close()
	if fi.Dir {
		return badRequest("path %s is a directory (use files/list, or archive to download it)", errdefs.Quote(p))
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	w.Header().Set(api.HeaderFileSize, strconv.FormatInt(fi.Size, 10))
	w.Header().Set(api.HeaderFileMode, "0"+strconv.FormatUint(uint64(fi.Mode.Perm()), 8))
	w.WriteHeader(http.StatusOK)
	_, err = io.Copy(w, rc)
	return err
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) error {
	fs, p, err := s.files(r)
	if err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if v := r.URL.Query().Get("mode"); v != "" {
		n, err := strconv.ParseUint(v, 8, 32)
		if err != nil || n > 0o7777 {
			return badRequest("mode=%s: want octal permission bits, e.g. 0644", errdefs.Quote(v))
		}
		mode = os.FileMode(n)
	}
	// Like the initial files of a create, a write makes missing parents.
	if dir := path.Dir(p); dir != "." && dir != "/" {
		if err := fs.MkdirAll(r.Context(), dir, 0o755); err != nil {
			return err
		}
	}
	if err := fs.WriteFile(r.Context(), p, mode, s.body(w, r)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request) error {
	fs, p, err := s.files(r)
	if err != nil {
		return err
	}
	rec, err := boolParam(r, "recursive", false)
	if err != nil {
		return err
	}
	if err := fs.Remove(r.Context(), p, rec); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) stat(w http.ResponseWriter, r *http.Request) error {
	fs, p, err := s.files(r)
	if err != nil {
		return err
	}
	fi, err := fs.Stat(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, fileView(fi, p))
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) error {
	fs, p, err := s.files(r)
	if err != nil {
		return err
	}
	entries, err := fs.ReadDir(r.Context(), p)
	if err != nil {
		return err
	}
	out := api.FileList{Entries: make([]api.FileInfo, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, fileView(e, path.Join(p, e.Name)))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.MkdirRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		return err
	}
	if err := manager.CheckPath("path", req.Path); err != nil {
		return err
	}
	mode := os.FileMode(req.Mode)
	if mode == 0 {
		mode = 0o755
	}
	if req.Mode > 0o7777 {
		return badRequest("mode: %#o is not a permission mode", req.Mode)
	}
	fs, err := s.m.Files(r.Context(), id)
	if err != nil {
		return err
	}
	if err := fs.MkdirAll(r.Context(), req.Path, mode); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) rename(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.RenameRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		return err
	}
	if err := manager.CheckPath("from", req.From); err != nil {
		return err
	}
	if err := manager.CheckPath("to", req.To); err != nil {
		return err
	}
	fs, err := s.m.Files(r.Context(), id)
	if err != nil {
		return err
	}
	if err := fs.Rename(r.Context(), req.From, req.To); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) error {
	fs, p, err := s.files(r)
	if err != nil {
		return err
	}
	rc, err := fs.Download(r.Context(), p)
	if err != nil {
		return err
	}
	defer rc.Close()
	// The first bytes tell whether the path exists: read them before the
	// status goes out, so a missing path is a 404, not a broken tar.
	buf := make([]byte, 32<<10)
	n, rerr := io.ReadFull(rc, buf)
	if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
		return rerr
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(buf[:n]); err != nil {
		return err
	}
	if rerr != nil {
		return nil
	}
	_, err = io.Copy(w, rc)
	return err
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request) error {
	fs, p, err := s.files(r)
	if err != nil {
		return err
	}
	if err := fs.Upload(r.Context(), p, s.body(w, r)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
