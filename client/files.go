package client

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
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

// ReadFile opens the file p of sandbox id. The FileInfo holds what the
// answer's headers tell: its name, path, size, mode and, when sent, its
// modification time. Close the reader.
func (c *Client) ReadFile(ctx context.Context, id, p string) (io.ReadCloser, *api.FileInfo, error) {
	req, err := c.filesRequest(ctx, http.MethodGet, id, "/files", p, nil, nil)
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

// Download returns a tar stream of the file or tree p of sandbox id; extract
// it with UntarTo. Close it.
func (c *Client) Download(ctx context.Context, id, p string) (io.ReadCloser, error) {
	req, err := c.filesRequest(ctx, http.MethodGet, id, "/archive", p, nil, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/x-tar")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

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

// UntarTo extracts the tar stream r into the existing directory dst. Only
// regular files, directories and symbolic links are accepted; modes are
// masked to 0777. It refuses, with an error naming the entry, any entry
// whose name is absolute or holds "..", and any that would land outside
// dst through a symbolic link (the extraction goes through os.OpenRoot).
// An existing file or link is replaced; an existing directory is kept.
func UntarTo(dst string, r io.Reader) error {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return fmt.Errorf("airlock: untar: %w", err)
	}
	defer root.Close()
	type dirMode struct {
		name string
		mode fs.FileMode
	}
	var dirs []dirMode
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("airlock: untar: %w", err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return fmt.Errorf("airlock: untar: entry %q: %w", hdr.Name, err)
		}
		fail := func(err error) error { return fmt.Errorf("airlock: untar: entry %q: %w", hdr.Name, err) }
		mode := fs.FileMode(hdr.Mode) & 0o777
		if name == "." {
			if hdr.Typeflag != tar.TypeDir {
				return fail(errors.New("not a directory"))
			}
			continue // dst itself: leave it as it is
		}
		if dir := path.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fail(err)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			fi, err := root.Lstat(name)
			switch {
			case err == nil && fi.IsDir():
			case err == nil:
				if err := root.Remove(name); err != nil {
					return fail(err)
				}
				fallthrough
			default:
				// Owner-writable until the end, so entries can land inside.
				if err := root.Mkdir(name, 0o700); err != nil {
					return fail(err)
				}
			}
			dirs = append(dirs, dirMode{name, mode})
		case tar.TypeReg, tar.TypeRegA:
			if err := replace(root, name); err != nil {
				return fail(err)
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fail(err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = root.Chmod(name, mode)
			}
			if err == nil && !hdr.ModTime.IsZero() {
				err = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
			}
			if err != nil {
				return fail(err)
			}
		case tar.TypeSymlink:
			if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
				return fail(errors.New("bad symbolic link target"))
			}
			if err := replace(root, name); err != nil {
				return fail(err)
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return fail(err)
			}
		default:
			return fail(fmt.Errorf("unsupported entry type %q (only files, directories and symbolic links)", string(hdr.Typeflag)))
		}
	}
	// Deepest first, so a read-only parent does not stop its children.
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return fmt.Errorf("airlock: untar: %s: %w", d.name, err)
		}
	}
	return nil
}

// entryName checks a tar entry's name and returns it clean, slash-separated
// and relative.
func entryName(n string) (string, error) {
	switch {
	case n == "":
		return "", errors.New("empty name")
	case strings.IndexByte(n, 0) >= 0:
		return "", errors.New("NUL in name")
	case strings.HasPrefix(n, "/") || filepath.IsAbs(n) || filepath.VolumeName(n) != "":
		return "", errors.New("absolute path refused")
	case filepath.Separator != '/' && strings.ContainsRune(n, filepath.Separator):
		return "", fmt.Errorf("name holds %q", filepath.Separator)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", errors.New(`".." refused`)
		}
	}
	return path.Clean(n), nil
}

// replace removes name if it exists and is not a directory.
func replace(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return errors.New("a directory is in the way")
	}
	return root.Remove(name)
}
