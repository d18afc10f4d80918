package server

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
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

// downloadMax is the max_size parameter of a download: the most it may
// carry (api.DefaultMaxDownload when not given).
func downloadMax(r *http.Request) (int64, error) {
	v := r.URL.Query().Get("max_size")
	if v == "" {
		return api.DefaultMaxDownload, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, badRequest("max_size=%q: want a positive number of bytes", v)
	}
	return n, nil
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) error {
	max, err := downloadMax(r)
	if err != nil {
		return err
	}
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
	if fi.Size > max {
		return fmt.Errorf("%s: %d bytes, over the limit of %d: raise it with max_size: %w", p, fi.Size, max, errdefs.ErrTooLarge)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(api.HeaderFileMode, "0"+strconv.FormatUint(uint64(fi.Mode.Perm()), 8))
	if fi.Size == 0 {
		// A file whose size says nothing of its content (/proc's, and
		// truly empty ones): as much as it gives, up to the limit, with
		// no length announced (the size header keeps the stat's 0).
		w.Header().Set(api.HeaderFileSize, "0")
		w.WriteHeader(http.StatusOK)
		_, err = io.Copy(w, io.LimitReader(rc, max))
		return err
	}
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	w.Header().Set(api.HeaderFileSize, strconv.FormatInt(fi.Size, 10))
	w.WriteHeader(http.StatusOK)
	_, err = io.CopyN(w, rc, fi.Size)
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
	max, err := downloadMax(r)
	if err != nil {
		return err
	}
	follow, err := boolParam(r, "follow_links", false)
	if err != nil {
		return err
	}
	fs, p, err := s.files(r)
	if err != nil {
		return err
	}
	// The agent answers once it has checked the archive (its size, the
	// kinds of its files): its refusals are errors here, before the status.
	rc, err := fs.Download(r.Context(), p, runtime.DownloadOptions{MaxSize: max, FollowLinks: follow})
	if err != nil {
		return err
	}
	defer rc.Close()
	return s.sendArchive(w, p, rc, max)
}

// sendArchive answers with the archive of p that rc streams, as
// forwardArchive checks it. A fault found after the status went out is
// sent as the api.HeaderError trailer, the stream cut short of a whole
// block so that no tar reader takes it for a complete archive.
func (s *Server) sendArchive(w http.ResponseWriter, p string, rc io.Reader, max int64) error {
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Trailer", api.HeaderError)
	w.WriteHeader(http.StatusOK)
	sent, err := forwardArchive(w, rc, max)
	if err != nil {
		if sent%512 == 0 {
			w.Write([]byte{0xff})
		}
		_, body, _ := classify(fmt.Errorf("download of %s: %w", p, err))
		s.met.Error(body.Code)
		b, _ := json.Marshal(body)
		w.Header().Set(api.HeaderError, string(b))
	}
	return err
}

// forwardArchive copies the tar stream src, from a sandbox and so
// untrusted, to w as it reads it, and checks it on the way: at most max
// bytes, regular files whose sizes (holes of sparse files included) add up
// to at most max, and nothing but files, directories and symlinks. It
// stops at the archive's end (what follows is dropped) or at the first
// fault, and returns how many bytes went to w.
func forwardArchive(w io.Writer, src io.Reader, max int64) (int64, error) {
	lw := &limitWriter{w: w, max: max}
	tr := tar.NewReader(io.TeeReader(src, lw))
	var content int64
	for {
		hdr, err := tr.Next()
		switch {
		case lw.over:
			return lw.n, tooLarge(max)
		case lw.err != nil:
			return lw.n, lw.err
		case err == io.EOF:
			return lw.n, nil
		case err != nil:
			return lw.n, fmt.Errorf("the sandbox's archive broke off: %v", err)
		}
		switch hdr.Typeflag {
		case tar.TypeReg:
			if content += hdr.Size; content > max {
				return lw.n, tooLarge(max)
			}
		case tar.TypeDir, tar.TypeSymlink:
		default:
			return lw.n, fmt.Errorf("the sandbox's archive holds %q of type %q (only files, directories and symbolic links are sent)", hdr.Name, string(hdr.Typeflag))
		}
	}
}

func tooLarge(max int64) error {
	return fmt.Errorf("more than %d bytes, the limit: raise it with max_size: %w", max, errdefs.ErrTooLarge)
}

// limitWriter passes at most max bytes on to w.
type limitWriter struct {
	w      io.Writer
	max, n int64
	over   bool
	err    error // w's
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.over || l.err != nil {
		return 0, errStop
	}
	q := p
	if int64(len(q)) > l.max-l.n {
		q, l.over = q[:l.max-l.n], true
	}
	n, err := l.w.Write(q)
	l.n += int64(n)
	if err != nil {
		l.err = err
		return n, err
	}
	if l.over {
		return n, errStop
	}
	return n, nil
}

var errStop = errors.New("download stopped")

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
