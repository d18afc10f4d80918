package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/runtime"
)

var _ runtime.Files = (*sandbox)(nil)

// fileOp sends a file request (with an optional descriptor) and waits for
// its answer.
func (sb *sandbox) fileOp(ctx context.Context, req *agent.FileRequest, fd *os.File) (*agent.FileResult, error) {
	var fds []int
	if fd != nil {
		fds = []int{int(fd.Fd())}
	}
	m, err := sb.call(ctx, func(seq uint64) *agent.Message {
		req.Seq = seq
		return &agent.Message{Type: agent.TypeFile, File: req}
	}, fds...)
	if err != nil {
		return nil, err
	}
	res := m.Result
	if res == nil {
		return nil, fmt.Errorf("agent answered %q to a file request", m.Type)
	}
	if res.Error != "" {
		return nil, fmt.Errorf("%s %s: %w", req.Op, req.Path, kindError(res))
	}
	return res, nil
}

func kindError(res *agent.FileResult) error {
	var kind error
	switch res.Kind {
	case agent.KindNotFound:
		kind = runtime.ErrNotFound
	case agent.KindExists:
		kind = runtime.ErrExists
	case agent.KindNotEmpty:
		kind = errdefs.ErrConflict // the state of the directory, not a name taken
	case agent.KindInvalid:
		kind = runtime.ErrInvalid
	case agent.KindPermission:
		kind = runtime.ErrPermission
	case agent.KindTooLarge:
		kind = runtime.ErrTooLarge
	default:
		return errors.New(res.Error)
	}
	return fmt.Errorf("%w (%s)", kind, res.Error)
}

func fileInfo(i *agent.FileInfo) runtime.FileInfo {
	if i == nil {
		return runtime.FileInfo{}
	}
	return runtime.FileInfo{Name: i.Name, Size: i.Size, Mode: os.FileMode(i.Mode), Dir: i.Dir, Link: i.Link, ModTime: time.Unix(0, i.ModTime)}
}

// Stat implements runtime.Files.
func (sb *sandbox) Stat(ctx context.Context, path string) (runtime.FileInfo, error) {
	res, err := sb.fileOp(ctx, &agent.FileRequest{Op: agent.FileStat, Path: path}, nil)
	if err != nil {
		return runtime.FileInfo{}, err
	}
	return fileInfo(res.Stat), nil
}

// ReadDir implements runtime.Files.
func (sb *sandbox) ReadDir(ctx context.Context, path string) ([]runtime.FileInfo, error) {
	res, err := sb.fileOp(ctx, &agent.FileRequest{Op: agent.FileList, Path: path}, nil)
	if err != nil {
		return nil, err
	}
	out := make([]runtime.FileInfo, len(res.Entries))
	for i := range res.Entries {
		out[i] = fileInfo(&res.Entries[i])
	}
	return out, nil
}

// MkdirAll implements runtime.Files.
func (sb *sandbox) MkdirAll(ctx context.Context, path string, mode os.FileMode) error {
	_, err := sb.fileOp(ctx, &agent.FileRequest{Op: agent.FileMkdir, Path: path, Mode: uint32(mode.Perm())}, nil)
	return err
}

var _ runtime.FileMaker = (*sandbox)(nil)

// MakeDir implements runtime.FileMaker: one agent call (an agent older than
// protocol 3 gets the stat, mkdir and stat it understands).
func (sb *sandbox) MakeDir(ctx context.Context, path string, mode os.FileMode, excl bool) (runtime.FileInfo, error) {
	if sb.agentVersion < 3 {
		if excl {
			if _, err := sb.Stat(ctx, path); err == nil {
				return runtime.FileInfo{}, fmt.Errorf("%s %s: %w", agent.FileMkdir, path, runtime.ErrExists)
			} else if !errors.Is(err, runtime.ErrNotFound) {
				return runtime.FileInfo{}, err
			}
		}
		if err := sb.MkdirAll(ctx, path, mode); err != nil {
			return runtime.FileInfo{}, err
		}
		return sb.Stat(ctx, path)
	}
	res, err := sb.fileOp(ctx, &agent.FileRequest{Op: agent.FileMkdir, Path: path, Mode: uint32(mode.Perm()), Excl: excl}, nil)
	if err != nil {
		return runtime.FileInfo{}, err
	}
	if res.Stat == nil {
		return sb.Stat(ctx, path)
	}
	return fileInfo(res.Stat), nil
}

// Move implements runtime.FileMaker.
func (sb *sandbox) Move(ctx context.Context, from, to string) (runtime.FileInfo, error) {
	res, err := sb.fileOp(ctx, &agent.FileRequest{Op: agent.FileRename, Path: from, To: to}, nil)
	if err != nil {
		return runtime.FileInfo{}, err
	}
	if res.Stat == nil { // an older agent
		return sb.Stat(ctx, to)
	}
	return fileInfo(res.Stat), nil
}

// Remove implements runtime.Files.
func (sb *sandbox) Remove(ctx context.Context, path string, recursive bool) error {
	_, err := sb.fileOp(ctx, &agent.FileRequest{Op: agent.FileRemove, Path: path, Recursive: recursive}, nil)
	return err
}

// Rename implements runtime.Files.
func (sb *sandbox) Rename(ctx context.Context, from, to string) error {
	_, err := sb.fileOp(ctx, &agent.FileRequest{Op: agent.FileRename, Path: from, To: to}, nil)
	return err
}

// ReadFile implements runtime.Files: the agent writes the content into a
// pipe; nothing is buffered whole.
func (sb *sandbox) ReadFile(ctx context.Context, path string) (io.ReadCloser, runtime.FileInfo, error) {
	r, res, err := sb.streamOut(ctx, &agent.FileRequest{Op: agent.FileRead, Path: path})
	if err != nil {
		return nil, runtime.FileInfo{}, err
	}
	return r, fileInfo(res.Stat), nil
}

// Download implements runtime.Files. The agent checks the archive before
// it answers, so its refusals come back as errors; the stream that follows
// is the sandbox's, to be checked by the caller.
func (sb *sandbox) Download(ctx context.Context, path string, opts runtime.DownloadOptions) (io.ReadCloser, error) {
	r, _, err := sb.streamOut(ctx, &agent.FileRequest{Op: agent.FileTarOut, Path: path, Max: opts.MaxSize, Follow: opts.FollowLinks})
	return r, err
}

// streamOut runs a request whose content the agent streams into a pipe.
func (sb *sandbox) streamOut(ctx context.Context, req *agent.FileRequest) (io.ReadCloser, *agent.FileResult, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	res, err := sb.fileOp(ctx, req, w)
	w.Close()
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	return r, res, nil
}

// WriteFile implements runtime.Files: the content goes through a pipe to
// the agent, which replaces the file atomically once it has all of it.
func (sb *sandbox) WriteFile(ctx context.Context, path string, mode os.FileMode, src io.Reader) error {
	return sb.streamIn(ctx, &agent.FileRequest{Op: agent.FileWrite, Path: path, Mode: uint32(mode.Perm())}, src)
}

// Upload implements runtime.Files.
func (sb *sandbox) Upload(ctx context.Context, dir string, src io.Reader) error {
	return sb.streamIn(ctx, &agent.FileRequest{Op: agent.FileTarIn, Path: dir}, src)
}

// streamIn runs a request whose content goes to the agent through a pipe;
// the agent answers once it has consumed all of it.
func (sb *sandbox) streamIn(ctx context.Context, req *agent.FileRequest, src io.Reader) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	// The content goes framed to agents that understand it, so that a
	// source that fails (a client gone, a body over its cap) never reads
	// as a complete stream: the agent then commits nothing.
	framed := sb.agentVersion >= 2
	req.Framed = framed
	copied := make(chan error, 1)
	go func() {
		var err error
		if framed {
			err = agent.CopyFramed(w, src)
		} else {
			_, err = io.Copy(w, src)
		}
		// The result goes first: when the agent sees the pipe end, the
		// cause is already known here.
		copied <- err
		w.Close()
	}()
	_, err = sb.fileOp(ctx, req, r)
	r.Close() // a copy still writing fails with EPIPE now
	if err != nil {
		select {
		case cerr := <-copied:
			if cerr != nil && !errors.Is(cerr, syscall.EPIPE) {
				// The source failed (a client gone, a body over its cap):
				// that is the cause, and nothing was committed.
				return fmt.Errorf("%s %s: reading the content: %w", req.Op, req.Path, cerr)
			}
		default: // the copy ends on its own once src or the pipe does
		}
		return err
	}
	if cerr := <-copied; cerr != nil {
		return fmt.Errorf("%s %s: reading the content: %w", req.Op, req.Path, cerr)
	}
	return nil
}
