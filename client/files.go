package client

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// filesRequest returns the request of a files operation on the path p of
// sandbox id.
func (c *Client) filesRequest(ctx context.Context, method, id, rest, p string, q url.Values, body io.Reader) (*http.Request, error) {
	sp, err := sandboxPath(id, rest)
	if err != nil {
		return nil, err
	}
	if p == "" {
		return nil, fmt.Errorf("airlock: empty path: %w", ErrInvalid)
	}
	if q == nil {
		q = url.Values{}
	}
	q.Set("path", p)
	return c.request(ctx, method, sp, q, body)
}

// DownloadOptions tune a download from a sandbox (ReadFile, Download,
// DownloadTo) and the extraction of an archive (UntarTo).
type DownloadOptions struct {
	// MaxSize is the most a download may carry, in bytes: the bytes of
	// the answer, and for an archive also the sizes of the files in it (a
	// sparse file counts its holes, which the copy has too). Past it the
	// download fails with an error of code api.CodeTooLarge and leaves
	// nothing behind. 0: api.DefaultMaxDownload.
	MaxSize int64
	// FollowLinks makes a symbolic link of a downloaded tree that leads
	// out of the tree arrive as a copy of the regular file it points to in
	// the sandbox. Without it such a link is left out (and listed).
	FollowLinks bool
}

func (o DownloadOptions) max() int64 {
	if o.MaxSize > 0 {
		return o.MaxSize
	}
	return api.DefaultMaxDownload
}

func (o DownloadOptions) query() url.Values {
	q := url.Values{}
	if o.MaxSize > 0 {
		q.Set("max_size", strconv.FormatInt(o.MaxSize, 10))
	}
	if o.FollowLinks {
		q.Set("follow_links", "true")
	}
	return q
}

// ReadFile opens the file p of sandbox id (a symbolic link is followed in
// the sandbox); only a regular file can be read, of at most opts.MaxSize
// bytes. The FileInfo holds what the answer's headers tell: its name, path,
// size, mode and, when sent, its modification time. Close the reader.
func (c *Client) ReadFile(ctx context.Context, id, p string, opts DownloadOptions) (io.ReadCloser, *api.FileInfo, error) {
	req, err := c.filesRequest(ctx, http.MethodGet, id, "/files", p, opts.query(), nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, nil, err
	}
	fi := &api.FileInfo{Name: path.Base(p), Path: p, Size: resp.ContentLength}
	if v := resp.Header.Get(api.HeaderFileSize); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			fi.Size = n
		}
	}
	if v := resp.Header.Get(api.HeaderFileMode); v != "" {
		if m, err := parseMode(v); err == nil {
			fi.Mode = m
		}
	}
	if v := resp.Header.Get("Last-Modified"); v != "" {
		if t, err := http.ParseTime(v); err == nil {
			fi.ModTime = t
		}
	}
	if fi.Size > opts.max() {
		resp.Body.Close()
		return nil, nil, &Error{Status: resp.StatusCode, Code: api.CodeTooLarge, Message: fmt.Sprintf("%s: %d bytes, over the limit of %d", p, fi.Size, opts.max())}
	}
	return resp.Body, fi, nil
}

// parseMode parses an octal mode ("0644", "644" or "0o644").
func parseMode(s string) (uint32, error) {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
	n, err := strconv.ParseUint(s, 8, 32)
	return uint32(n), err
}

// WriteFile writes what r holds to the file p of sandbox id, atomically,
// streaming it (r is never held whole, nor closed). mode's permission bits
// are the file's; 0 leaves the daemon's default.
func (c *Client) WriteFile(ctx context.Context, id, p string, mode os.FileMode, r io.Reader) error {
	q := url.Values{}
	if mode.Perm() != 0 {
		q.Set("mode", fmt.Sprintf("%04o", uint32(mode.Perm())))
	}
	req, err := c.filesRequest(ctx, http.MethodPut, id, "/files", p, q, streamBody(r))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	return c.finish(req, nil)
}

// Stat describes the file p of sandbox id (a symlink is not followed).
func (c *Client) Stat(ctx context.Context, id, p string) (*api.FileInfo, error) {
	req, err := c.filesRequest(ctx, http.MethodGet, id, "/files/stat", p, nil, nil)
	if err != nil {
		return nil, err
	}
	var fi api.FileInfo
	if err := c.finish(req, &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// List returns the entries of the directory p of sandbox id.
func (c *Client) List(ctx context.Context, id, p string) ([]api.FileInfo, error) {
	req, err := c.filesRequest(ctx, http.MethodGet, id, "/files/list", p, nil, nil)
	if err != nil {
		return nil, err
	}
	var l api.FileList
	if err := c.finish(req, &l); err != nil {
		return nil, err
	}
	return l.Entries, nil
}

// Mkdir makes the directory p of sandbox id and its missing parents (mkdir
// -p) with mode's permission bits (0: the daemon's default).
func (c *Client) Mkdir(ctx context.Context, id, p string, mode os.FileMode) error {
	sp, err := sandboxPath(id, "/files/mkdir")
	if err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, sp, nil, &api.MkdirRequest{Path: p, Mode: uint32(mode.Perm())}, nil)
}

// Remove removes the file p of sandbox id; with recursive, a directory and
// everything in it.
func (c *Client) Remove(ctx context.Context, id, p string, recursive bool) error {
	var q url.Values
	if recursive {
		q = url.Values{"recursive": {"true"}}
	}
	req, err := c.filesRequest(ctx, http.MethodDelete, id, "/files", p, q, nil)
	if err != nil {
		return err
	}
	return c.finish(req, nil)
}

// Rename renames the file from to to, in sandbox id.
func (c *Client) Rename(ctx context.Context, id, from, to string) error {
	sp, err := sandboxPath(id, "/files/rename")
	if err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, sp, nil, &api.RenameRequest{From: from, To: to}, nil)
}

// Download returns a tar stream of the file or tree p of sandbox id (a
// symbolic link given as p is followed in the sandbox; those in a tree are
// links in the stream, see opts.FollowLinks); extract it with UntarTo, or
// use DownloadTo. Sparse files come as sparse entries (PAX format 1.0, as
// GNU tar writes them). A download over opts.MaxSize, or of a FIFO, socket
// or device, fails before the stream starts; a fault after it started is
// the error of the stream's last Read (an *Error, Status 0). Close it.
func (c *Client) Download(ctx context.Context, id, p string, opts DownloadOptions) (io.ReadCloser, error) {
	req, err := c.filesRequest(ctx, http.MethodGet, id, "/archive", p, opts.query(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/x-tar")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	return &archiveBody{resp}, nil
}

// archiveBody is an archive's answer: at its end, the error trailer the
// daemon sends when the stream failed after the status becomes the error
// of the last Read.
type archiveBody struct{ resp *http.Response }

func (a *archiveBody) Read(p []byte) (int, error) {
	n, err := a.resp.Body.Read(p)
	if err == io.EOF {
		if v := a.resp.Trailer.Get(api.HeaderError); v != "" {
			e := &Error{Code: api.CodeInternal, Message: v}
			var b api.ErrorBody
			if json.Unmarshal([]byte(v), &b) == nil && b.Code != "" {
				e.Code, e.Message = b.Code, b.Message
			}
			return n, e
		}
	}
	return n, err
}

func (a *archiveBody) Close() error { return a.resp.Body.Close() }

// Upload extracts the tar stream tr (as TarDir makes) into the directory
// dir of sandbox id, streaming it.
func (c *Client) Upload(ctx context.Context, id, dir string, tr io.Reader) error {
	req, err := c.filesRequest(ctx, http.MethodPut, id, "/archive", dir, nil, streamBody(tr))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	return c.finish(req, nil)
}

// TarDir writes a tar stream of src, a local file or directory tree, to w.
// Its entries are named under src's base name ("dir/", "dir/a/b"). Only
// regular files, directories and symbolic links are stored; links are
// stored as links, never followed; sockets, devices and FIFOs are skipped.
func TarDir(w io.Writer, src string) error {
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	name := filepath.Base(abs)
	if name == string(filepath.Separator) || name == "." {
		return fmt.Errorf("airlock: tar %s: cannot archive the root directory", src)
	}
	return tarAs(w, src, name)
}

// tarAs writes a tar stream of src with its entries named under name.
func tarAs(w io.Writer, src, name string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		entry := path.Join(name, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{
			Name:    entry,
			Mode:    int64(info.Mode().Perm()),
			ModTime: info.ModTime().Truncate(time.Second),
		}
		switch {
		case info.Mode().IsRegular():
			hdr.Typeflag = tar.TypeReg
			hdr.Size = info.Size()
		case info.IsDir():
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case info.Mode()&fs.ModeSymlink != 0:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return nil
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if n, err := io.CopyN(tw, f, hdr.Size); err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("%s: the file shrank while it was archived (%d of %d bytes)", p, n, hdr.Size)
			}
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("airlock: tar %s: %w", src, err)
	}
	return tw.Close()
}
