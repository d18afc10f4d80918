package e2b

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/airlock-dev/airlock/internal/e2b/proto/filesystem"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/manager"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// WatchInterval is how often WatchDir looks at the directory: it polls
// through the sandbox's agent (no inotify watch is left in the sandbox).
const WatchInterval = 200 * time.Millisecond

// maxWatchEntries bounds what one watch compares each time.
const maxWatchEntries = 10000

// fsService is envd's filesystem service over the sandbox's agent. Paths
// are absolute in the sandbox or relative to /workspace, and resolve in the
// sandbox's own view, so no path names a host file.
type fsService struct{ s *Server }

// home expands a leading ~ as envd does, to the user's home: here
// /workspace, where relative paths and commands start.
func home(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		return "/workspace" + p[1:]
	}
	return p
}

// absPath is a path as the sandbox sees it.
func absPath(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join("/workspace", p)
}

func (f *fsService) files(ctx context.Context, name, p string) (runtime.Files, error) {
	if err := manager.CheckPath(name, p); err != nil {
		return nil, rpcErr(err)
	}
	fsys, err := f.s.m.Files(ctx, sandboxOf(ctx))
	return fsys, rpcErr(err)
}

func entry(fi runtime.FileInfo, p string) *pb.EntryInfo {
	e := &pb.EntryInfo{Name: fi.Name, Path: absPath(p), Size: fi.Size, Owner: "root", Group: "root",
		ModifiedTime: timestamppb.New(fi.ModTime)}
	if e.Name == "" {
		e.Name = path.Base(e.Path)
	}
	mode := fi.Mode.Perm()
	switch {
	case fi.Link != "":
		e.Type = pb.FileType_FILE_TYPE_SYMLINK
		link := fi.Link
		e.SymlinkTarget = &link
		mode |= fs.ModeSymlink
	case fi.Dir:
		e.Type = pb.FileType_FILE_TYPE_DIRECTORY
		mode |= fs.ModeDir
	default:
		e.Type = pb.FileType_FILE_TYPE_FILE
	}
	e.Mode = uint32(mode)
	e.Permissions = mode.String()
	return e
}

func (f *fsService) stat(ctx context.Context, fsys runtime.Files, p string) (*pb.EntryInfo, error) {
	fi, err := fsys.Stat(ctx, p)
	if err != nil {
		return nil, rpcErr(err)
	}
	return entry(fi, p), nil
}

func (f *fsService) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	req.Msg.Path = home(req.Msg.Path)
	fsys, err := f.files(ctx, "path", req.Msg.Path)
	if err != nil {
		return nil, err
	}
	e, err := f.stat(ctx, fsys, req.Msg.Path)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StatResponse{Entry: e}), nil
}

func (f *fsService) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	req.Msg.Path = home(req.Msg.Path)
	p := req.Msg.Path
	fsys, err := f.files(ctx, "path", p)
	if err != nil {
		return nil, err
	}
	exists := func() error {
		return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s already exists", errdefs.Quote(p)))
	}
	// One call into the sandbox where the runtime can: an exclusive mkdir
	// (with parents) that answers with what it made.
	if fm, ok := fsys.(runtime.FileMaker); ok {
		fi, err := fm.MakeDir(ctx, p, 0o755, true)
		if errors.Is(err, errdefs.ErrExists) {
			return nil, exists()
		}
		if err != nil {
			return nil, rpcErr(err)
		}
		return connect.NewResponse(&pb.MakeDirResponse{Entry: entry(fi, p)}), nil
	}
	if _, err := fsys.Stat(ctx, p); err == nil {
		return nil, exists()
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, rpcErr(err)
	}
	if err := fsys.MkdirAll(ctx, p, 0o755); err != nil {
		return nil, rpcErr(err)
	}
	e, err := f.stat(ctx, fsys, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: e}), nil
}

func (f *fsService) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	req.Msg.Source, req.Msg.Destination = home(req.Msg.Source), home(req.Msg.Destination)
	fsys, err := f.files(ctx, "source", req.Msg.Source)
	if err != nil {
		return nil, err
	}
	if err := manager.CheckPath("destination", req.Msg.Destination); err != nil {
		return nil, rpcErr(err)
	}
	if fm, ok := fsys.(runtime.FileMaker); ok {
		fi, err := fm.Move(ctx, req.Msg.Source, req.Msg.Destination)
		if err != nil {
			return nil, rpcErr(err)
		}
		return connect.NewResponse(&pb.MoveResponse{Entry: entry(fi, req.Msg.Destination)}), nil
	}
	if err := fsys.Rename(ctx, req.Msg.Source, req.Msg.Destination); err != nil {
		return nil, rpcErr(err)
	}
	e, err := f.stat(ctx, fsys, req.Msg.Destination)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: e}), nil
}

func (f *fsService) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	req.Msg.Path = home(req.Msg.Path)
	p := req.Msg.Path
	fsys, err := f.files(ctx, "path", p)
	if err != nil {
		return nil, err
	}
	depth := int(req.Msg.Depth)
	if depth <= 0 {
		depth = 1
	}
	// No Stat first (one call less): listing a file is the agent's
	// ENOTDIR, an invalid argument.
	out := &pb.ListDirResponse{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		list, err := fsys.ReadDir(ctx, dir)
		if err != nil {
			return err
		}
		for _, c := range list {
			if len(out.Entries) >= maxWatchEntries {
				return fmt.Errorf("%s: more than %d entries: %w", errdefs.Quote(p), maxWatchEntries, errdefs.ErrTooLarge)
			}
			cp := path.Join(dir, c.Name)
			out.Entries = append(out.Entries, entry(c, cp))
			if c.Dir && c.Link == "" && level < depth {
				if err := walk(cp, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(p, 1); err != nil {
		return nil, rpcErr(err)
	}
	return connect.NewResponse(out), nil
}

func (f *fsService) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	req.Msg.Path = home(req.Msg.Path)
	fsys, err := f.files(ctx, "path", req.Msg.Path)
	if err != nil {
		return nil, err
	}
	if err := fsys.Remove(ctx, req.Msg.Path, true); err != nil {
		return nil, rpcErr(err)
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}

// snapEntry is what a watch compares of one entry.
type snapEntry struct {
	size int64
	mod  time.Time
	mode fs.FileMode
	dir  bool
}

// snapshot lists dir (and, recursive, what is under it) by name relative
// to dir.
func snapshot(ctx context.Context, fsys runtime.Files, dir string, recursive bool) (map[string]snapEntry, error) {
	out := map[string]snapEntry{}
	var walk func(rel string, level int) error
	walk = func(rel string, level int) error {
		list, err := fsys.ReadDir(ctx, path.Join(dir, rel))
		if err != nil {
			if rel != "" && errors.Is(err, errdefs.ErrNotFound) {
				return nil // removed meanwhile
			}
			return err
		}
		for _, c := range list {
			if len(out) >= maxWatchEntries {
				return fmt.Errorf("watch %s: more than %d entries: %w", errdefs.Quote(dir), maxWatchEntries, errdefs.ErrTooLarge)
			}
			name := path.Join(rel, c.Name)
			out[name] = snapEntry{size: c.Size, mod: c.ModTime, mode: c.Mode, dir: c.Dir}
			if recursive && c.Dir && c.Link == "" && level < 64 {
				if err := walk(name, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk("", 0)
}

func (f *fsService) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	req.Msg.Path = home(req.Msg.Path)
	dir := req.Msg.Path
	fsys, err := f.files(ctx, "path", dir)
	if err != nil {
		return err
	}
	fi, err := fsys.Stat(ctx, dir)
	if err != nil {
		return rpcErr(err)
	}
	if !fi.Dir {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s is not a directory", errdefs.Quote(dir)))
	}
	prev, err := snapshot(ctx, fsys, dir, req.Msg.Recursive)
	if err != nil {
		return rpcErr(err)
	}
	if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	ka := keepalive(req.Header())
	lastSent := time.Now()
	t := time.NewTicker(WatchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		fsys, err := f.s.m.Files(ctx, sandboxOf(ctx))
		if err != nil {
			return rpcErr(err)
		}
		cur, err := snapshot(ctx, fsys, dir, req.Msg.Recursive)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return rpcErr(err)
		}
		var evs []*pb.FilesystemEvent
		for name, e := range cur {
			old, ok := prev[name]
			switch {
			case !ok:
				evs = append(evs, &pb.FilesystemEvent{Name: name, Type: pb.EventType_EVENT_TYPE_CREATE})
			case old.dir != e.dir:
				evs = append(evs, &pb.FilesystemEvent{Name: name, Type: pb.EventType_EVENT_TYPE_REMOVE},
					&pb.FilesystemEvent{Name: name, Type: pb.EventType_EVENT_TYPE_CREATE})
			case !e.dir && (old.size != e.size || !old.mod.Equal(e.mod)):
				evs = append(evs, &pb.FilesystemEvent{Name: name, Type: pb.EventType_EVENT_TYPE_WRITE})
			case old.mode != e.mode:
				evs = append(evs, &pb.FilesystemEvent{Name: name, Type: pb.EventType_EVENT_TYPE_CHMOD})
			}
		}
		for name := range prev {
			if _, ok := cur[name]; !ok {
				evs = append(evs, &pb.FilesystemEvent{Name: name, Type: pb.EventType_EVENT_TYPE_REMOVE})
			}
		}
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].Name < evs[j].Name })
		prev = cur
		for _, ev := range evs {
			if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
			lastSent = time.Now()
		}
		if ka > 0 && time.Since(lastSent) >= ka {
			if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
			lastSent = time.Now()
		}
	}
}
