package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxPath bounds a path in a file request (PATH_MAX).
const maxPath = 4096

// file runs one file operation. It runs in the sandbox, under every layer
// the sandbox's processes have, so a path can only ever name the sandbox's
// own files: "../../etc/passwd" is the sandbox's /etc/passwd.
func (s *Server) file(req *FileRequest, files []*os.File) {
	if req == nil {
		closeAll(files)
		return
	}
	res := &FileResult{Seq: req.Seq}
	defer func() {
		if res != nil { // nil: answered later (write)
			s.send(&Message{Type: TypeFileResult, Result: res})
		}
	}()
	fail := func(err error) {
		res.Error, res.Kind = err.Error(), errKind(err)
	}
	path, err := sandboxPath(req.Path)
	if err != nil {
		closeAll(files)
		fail(err)
		return
	}
	switch req.Op {
	case FileStat:
		closeAll(files)
		fi, err := os.Lstat(path)
		if err != nil {
			fail(err)
			return
		}
		res.Stat = info(path, fi)
	case FileList:
		closeAll(files)
		entries, err := os.ReadDir(path)
		if err != nil {
			fail(err)
			return
		}
		res.Entries = []FileInfo{}
		for _, e := range entries {
			if fi, err := e.Info(); err == nil {
				res.Entries = append(res.Entries, *info(filepath.Join(path, e.Name()), fi))
			}
		}
	case FileMkdir:
		closeAll(files)
		mode := perm(req.Mode, 0o755)
		if req.Excl {
			// The parents as with -p, then the directory itself, which
			// must be new: one atomic answer to "did it exist?".
			if err := os.MkdirAll(filepath.Dir(path), mode); err != nil {
				fail(err)
				return
			}
			err = os.Mkdir(path, mode)
		} else {
			err = os.MkdirAll(path, mode)
		}
		if err != nil {
			fail(err)
			return
		}
		// What was made, so that a caller needs no stat of its own (gone
		// again meanwhile: no Stat, the caller asks).
		if fi, err := os.Lstat(path); err == nil {
			res.Stat = info(path, fi)
		}
	case FileRemove:
		closeAll(files)
		if path == "/" || path == "/workspace" {
			fail(invalidf("refusing to remove %s", path))
			return
		}
		if _, err := os.Lstat(path); err != nil {
			fail(err)
			return
		}
		if req.Recursive {
			err = os.RemoveAll(path)
		} else {
			err = os.Remove(path)
		}
		if err != nil {
			fail(err)
		}
	case FileRename:
		closeAll(files)
		to, err := sandboxPath(req.To)
		if err != nil {
			fail(err)
			return
		}
		if err := os.Rename(path, to); err != nil {
			fail(err)
			return
		}
		if fi, err := os.Lstat(to); err == nil {
			res.Stat = info(to, fi)
		}
	case FileRead:
		if len(files) != 1 {
			closeAll(files)
			fail(invalidf("read wants one descriptor"))
			return
		}
		// Opened without blocking (a FIFO would hang the request); only a
		// regular file is read.
		f, err := openRegular(path)
		if err == nil {
			var fi os.FileInfo
			if fi, err = f.Stat(); err == nil {
				res.Stat = info(path, fi)
			}
			if err != nil {
				f.Close()
			}
		} else if errors.Is(err, unix.EISDIR) || isInvalid(err) {
			if fi, serr := os.Stat(path); serr == nil && fi.IsDir() {
				err = &fs.PathError{Op: "read", Path: path, Err: unix.EISDIR}
			}
		}
		if err != nil {
			files[0].Close()
			fail(err)
			return
		}
		// The answer goes first; the content follows on the descriptor,
		// which closes at its end (Stat.Size tells a short read; a file
		// that grew is cut at the size announced). A file whose size is 0
		// may have content all the same (/proc's): it goes to its end,
		// and the reader stops reading where its limit is.
		go func(dst *os.File, n int64) {
			defer dst.Close()
			defer f.Close()
			if n == 0 {
				io.Copy(dst, f)
				return
			}
			io.CopyN(dst, f, n)
		}(files[0], res.Stat.Size)
	case FileWrite:
		if len(files) != 1 {
			closeAll(files)
			fail(invalidf("write wants one descriptor"))
			return
		}
		// Synchronous answer after the whole content is in place, but off
		// the request loop so a slow writer does not stall the sandbox.
		res = nil
		go func(f *os.File) {
			defer f.Close()
			var src io.Reader = f
			if req.Framed {
				src = FramedReader(f)
			}
			r := &FileResult{Seq: req.Seq}
			if err := writeAtomic(path, perm(req.Mode, 0o644), src); err != nil {
				r.Error, r.Kind = err.Error(), errKind(err)
			}
			s.send(&Message{Type: TypeFileResult, Result: r})
		}(files[0])
	case FileTarOut:
		if len(files) != 1 {
			closeAll(files)
			fail(invalidf("tar_out wants one descriptor"))
			return
		}
		// The archive is checked (its size, the kinds of its files) by a
		// first walk; the answer follows, then the stream, whose end
		// closes the pipe (a truncated stream is an invalid tar).
		res = nil
		go func(dst *os.File) {
			defer dst.Close()
			answered := false
			err := tarOut(path, dst, archiveOptions{max: req.Max, follow: req.Follow}, func() error {
				answered = true
				s.send(&Message{Type: TypeFileResult, Result: &FileResult{Seq: req.Seq}})
				return nil
			})
			if err != nil && !answered {
				s.send(&Message{Type: TypeFileResult, Result: &FileResult{Seq: req.Seq, Error: err.Error(), Kind: errKind(err)}})
			}
		}(files[0])
	case FileTarIn:
		if len(files) != 1 {
			closeAll(files)
			fail(invalidf("tar_in wants one descriptor"))
			return
		}
		res = nil // answered once everything is extracted
		go func(f *os.File) {
			defer f.Close()
			var src io.Reader = f
			if req.Framed {
				src = FramedReader(f)
			}
			r := &FileResult{Seq: req.Seq}
			err := tarIn(path, src)
			if err == nil && req.Framed {
				// What follows the archive's end, to the end mark: a
				// stream cut there still failed (and the sender is not
				// left writing into a closed pipe).
				_, err = io.Copy(io.Discard, src)
			}
			if err != nil {
				r.Error, r.Kind = err.Error(), errKind(err)
			}
			s.send(&Message{Type: TypeFileResult, Result: r})
		}(files[0])
	default:
		closeAll(files)
		fail(invalidf("unknown file operation %q", req.Op))
	}
}

// writeAtomic writes src to a temporary file next to path and renames it
// over path, so a reader never sees a half-written file.
func writeAtomic(path string, mode os.FileMode, src io.Reader) error {
	// A directory cannot be written over (the rename would fail after the
	// whole upload, or the temporary file land beside it, even in /).
	if fi, err := os.Lstat(path); err == nil && fi.IsDir() {
		return invalidf("%s is a directory: name a file in it", path)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".airlock-write-*")
	if err != nil {
		// Named by the file asked for, not the temporary one (the
		// directory cannot be written: read-only, or not ours).
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return &fs.PathError{Op: "write", Path: path, Err: pe.Err}
		}
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	ok = true
	return nil
}

// sandboxPath checks and cleans a path of a file request: absolute in the
// sandbox, or relative to /workspace.
func sandboxPath(p string) (string, error) {
	switch {
	case p == "":
		return "", invalidf("empty path")
	case len(p) > maxPath:
		return "", invalidf("path of %d bytes is longer than %d", len(p), maxPath)
	case strings.ContainsRune(p, 0):
		return "", invalidf("path contains a NUL byte")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join("/workspace", p)
	}
	return filepath.Clean(p), nil
}

func info(path string, fi os.FileInfo) *FileInfo {
	i := &FileInfo{Name: fi.Name(), Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), Dir: fi.IsDir(), ModTime: fi.ModTime().UnixNano()}
	if fi.Mode()&os.ModeSymlink != 0 {
		i.Link, _ = os.Readlink(path)
	}
	return i
}

func perm(mode uint32, def os.FileMode) os.FileMode {
	if mode == 0 {
		return def
	}
	return os.FileMode(mode) & os.ModePerm
}

type invalidError string

func (e invalidError) Error() string { return string(e) }

func invalidf(format string, args ...any) error {
	return invalidError(fmt.Sprintf(format, args...))
}

func isInvalid(err error) bool {
	var inv invalidError
	return errors.As(err, &inv)
}

type tooLargeError string

func (e tooLargeError) Error() string { return string(e) }

func tooLargef(format string, args ...any) error {
	return tooLargeError(fmt.Sprintf(format, args...))
}

func errKind(err error) string {
	var inv invalidError
	var big tooLargeError
	switch {
	case errors.As(err, &inv):
		return KindInvalid
	case errors.As(err, &big):
		return KindTooLarge
	case errors.Is(err, fs.ErrNotExist):
		return KindNotFound
	case errors.Is(err, unix.ENOTEMPTY): // before ErrExist, which matches it too
		return KindNotEmpty
	case errors.Is(err, fs.ErrExist):
		return KindExists
	case errors.Is(err, fs.ErrPermission), errors.Is(err, unix.EROFS), errors.Is(err, unix.EPERM):
		return KindPermission
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENAMETOOLONG), errors.Is(err, unix.ELOOP),
		errors.Is(err, unix.EXDEV), errors.Is(err, unix.EBUSY): // a rename across mounts, of a mount point
		return KindInvalid
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT): // the sandbox's disk is full
		return KindTooLarge
	case strings.Contains(err.Error(), "path escapes from parent"):
		return KindInvalid // os.Root refusing a name that leaves the directory
	}
	return KindOther
}
