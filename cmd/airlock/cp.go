package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
)

func newCpCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files between this host and a sandbox",
		Long: `Copy a file or a directory tree between this host and a sandbox. Exactly one
of SRC and DST is ID:PATH, a path in sandbox ID (absolute, or relative to
/workspace); the other is a local path, or - for a tar stream on stdin (to
a sandbox directory) or stdout (from a sandbox). Write ./NAME for a local
file whose name looks like ID:PATH.

As with docker cp: when DST is an existing directory, SRC lands inside it
under its own name; otherwise DST is the name of the copy (its parent must
exist). Only files, directories and symbolic links are copied.

Into a sandbox, symbolic links are copied as links, never followed.

From a sandbox: a SRC that is a link is followed in the sandbox (its copy
is what it points to). In a tree, links that lead, followed in the copy,
only within the tree are kept; the others are left out with a warning
listing them, or with --follow-links copied as the file they point to in
the sandbox. cp never writes through, or replaces, a link at DST. Sparse
files stay sparse. FIFOs, sockets and devices are refused. The copy may
carry at most --max-size bytes (the files' sizes, holes included, count
too); past it cp fails and leaves nothing behind.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, dst, err := parseCpArgs(args[0], args[1])
			if err != nil {
				return err
			}
			opts, err := downloadOptions(cmd, !dst.remote)
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if dst.remote {
				err = cpToSandbox(ctx, c, src.path, dst, cmd.InOrStdin())
			} else {
				err = cpFromSandbox(ctx, c, src, dst.path, opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if err != nil {
				return apiFail(cmd, c, "cp", err)
			}
			return nil
		},
	}
	addHostFlag(cmd)
	cmd.Flags().String("max-size", "1G", "from a sandbox: the most the copy may carry (e.g. 500M, 20G)")
	cmd.Flags().Bool("follow-links", false, "from a sandbox: copy a link that leads out of the tree as the file it points to, instead of leaving it out")
	return cmd
}

// downloadOptions reads cp's download flags; they are refused on an
// upload.
func downloadOptions(cmd *cobra.Command, download bool) (client.DownloadOptions, error) {
	var opts client.DownloadOptions
	f := cmd.Flags()
	if !download {
		for _, name := range []string{"max-size", "follow-links"} {
			if f.Changed(name) {
				return opts, fmt.Errorf("cp: --%s applies to copies from a sandbox", name)
			}
		}
		return opts, nil
	}
	v, _ := f.GetString("max-size")
	n, err := policy.ParseSize(v)
	if err != nil || n <= 0 {
		return opts, fmt.Errorf("cp: --max-size %q: want a positive size, e.g. 500M or 20G", v)
	}
	opts.MaxSize = n
	opts.FollowLinks, _ = f.GetBool("follow-links")
	return opts, nil
}

// cpArg is one side of cp: a local path (or "-") or a path in a sandbox.
type cpArg struct {
	remote bool
	id     string
	path   string
}

// remoteArg matches ID:PATH.
var remoteArg = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(sb-[0-9a-f]{16}):(.*)$`) }) // compiled on first use, not at every start

func parseCpArg(s string) cpArg {
	if m := remoteArg().FindStringSubmatch(s); m != nil {
		return cpArg{remote: true, id: m[1], path: m[2]}
	}
	return cpArg{path: s}
}

// parseCpArgs parses cp's arguments; its errors are usage errors.
func parseCpArgs(src, dst string) (cpArg, cpArg, error) {
	s, d := parseCpArg(src), parseCpArg(dst)
	switch {
	case s.remote && d.remote:
		return s, d, errors.New("cp: both SRC and DST are in a sandbox; copy through this host (airlock cp ID:PATH - | airlock cp - ID2:DIR)")
	case !s.remote && !d.remote:
		return s, d, fmt.Errorf("cp: neither %s nor %s is in a sandbox: one must be ID:PATH (ID like sb-0123456789abcdef)", errdefs.Quote(src), errdefs.Quote(dst))
	}
	r, l := s, d
	if d.remote {
		r, l = d, s
	}
	if r.path == "" {
		return s, d, fmt.Errorf("cp: %s: no path after the sandbox id", errdefs.Quote(r.id+":"))
	}
	if l.path == "" {
		return s, d, errors.New("cp: empty local path")
	}
	return s, d, nil
}

// remoteBase is the name a sandbox path's copy gets by default.
func remoteBase(p string) (string, error) {
	if !path.IsAbs(p) {
		p = path.Join("/workspace", p)
	}
	b := path.Base(p)
	if b == "/" {
		return "", errors.New("cannot copy / into a directory: name the copy (a destination that does not exist yet)")
	}
	return b, nil
}

// cpToSandbox copies the local file or tree src ("-": a tar stream on
// stdin) to dst.
func cpToSandbox(ctx context.Context, c *client.Client, src string, dst cpArg, stdin io.Reader) error {
	if src == "-" {
		return c.Upload(ctx, dst.id, dst.path, stdin)
	}
	lfi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if m := lfi.Mode(); !m.IsRegular() && !m.IsDir() && m&fs.ModeSymlink == 0 {
		// A tree's FIFOs, sockets and devices are left out; one named
		// alone would be an upload of nothing that says it worked.
		return fmt.Errorf("%s is %s: only regular files, directories and symlinks are copied", src, agent.FileKind(m))
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	dir, name := path.Dir(dst.path), path.Base(dst.path)
	fi, err := c.Stat(ctx, dst.id, dst.path)
	if err == nil && !fi.Dir && fi.Link != "" {
		// A link to a directory is a directory here, as with docker cp.
		target := fi.Link
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(dst.path), target)
		}
		if tfi, terr := c.Stat(ctx, dst.id, target); terr == nil && tfi.Dir {
			fi = tfi
		}
	}
	switch {
	case err == nil && fi.Dir:
		dir, name = dst.path, filepath.Base(abs)
		if name == string(filepath.Separator) {
			return errors.New("cannot copy / into a directory: name the copy")
		}
	case err == nil:
		if lfi.IsDir() {
			return fmt.Errorf("cannot copy directory %s onto file %s:%s", src, dst.id, dst.path)
		}
	case errors.Is(err, client.ErrNotFound):
		if strings.HasSuffix(dst.path, "/") {
			return fmt.Errorf("directory %s:%s does not exist", dst.id, dst.path)
		}
	default:
		return err
	}
	if name == "." || name == "/" || name == ".." {
		return fmt.Errorf("bad destination %s:%s", dst.id, dst.path)
	}
	pr, pw := io.Pipe()
	go func() {
		if name == filepath.Base(abs) {
			pw.CloseWithError(client.TarDir(pw, abs))
			return
		}
		tpr, tpw := io.Pipe()
		go func() { tpw.CloseWithError(client.TarDir(tpw, abs)) }()
		err := renameTar(pw, tpr, name)
		tpr.CloseWithError(errors.New("upload ended"))
		pw.CloseWithError(err)
	}()
	err = c.Upload(ctx, dst.id, dir, pr)
	pr.CloseWithError(errors.New("upload ended"))
	return err
}

// cpFromSandbox copies the file or tree src of a sandbox to the local path
// dst ("-": a tar stream on stdout, as the daemon sends it) and warns on
// stderr of the links it left out.
func cpFromSandbox(ctx context.Context, c *client.Client, src cpArg, dst string, opts client.DownloadOptions, stdout, stderr io.Writer) error {
	if dst == "-" {
		rc, err := c.Download(ctx, src.id, src.path, opts)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(stdout, rc)
		return err
	}
	target := dst
	// Lstat: a link at dst is not followed (a trailing slash asks for the
	// directory it points to).
	lfi, err := os.Lstat(dst)
	switch {
	case err == nil && lfi.Mode()&fs.ModeSymlink != 0:
		to, _ := os.Readlink(dst)
		return fmt.Errorf("%s is a symbolic link (to %s): cp neither writes through nor replaces one; remove it, or write %s/ to copy into the directory it points to", dst, to, dst)
	case err == nil && lfi.IsDir():
		name, err := remoteBase(src.path)
		if err != nil {
			return err
		}
		target = filepath.Join(dst, name)
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		if strings.HasSuffix(dst, string(filepath.Separator)) {
			return fmt.Errorf("directory %s does not exist", dst)
		}
	default:
		return err
	}
	x, err := c.DownloadTo(ctx, src.id, src.path, target, opts)
	if err != nil {
		return err
	}
	warnSkipped(stderr, x.SkippedLinks)
	return nil
}

// maxListed bounds the links a warning lists.
const maxListed = 20

// warnSkipped tells which links a copy left out.
func warnSkipped(w io.Writer, skipped []client.SkippedLink) {
	if len(skipped) == 0 {
		return
	}
	what := fmt.Sprintf("%d symbolic links that lead", len(skipped))
	if len(skipped) == 1 {
		what = "1 symbolic link that leads"
	}
	fmt.Fprintf(w, "airlock: cp: left out %s out of the copied tree (--follow-links copies the files they point to):\n", what)
	for i, l := range skipped {
		if i == maxListed {
			fmt.Fprintf(w, "  ... and %d more\n", len(skipped)-maxListed)
			break
		}
		// Names and targets are the sandbox's: quoted, so no control
		// character reaches the terminal.
		fmt.Fprintf(w, "  %s -> %s\n", strconv.Quote(l.Name), strconv.Quote(l.Target))
	}
}

// renameTar copies the tar stream r to w with its one top-level entry
// renamed to name: "old/x" becomes "name/x". A stream whose first entry is
// "." (entries relative to the directory archived) gets name as a prefix.
func renameTar(w io.Writer, r io.Reader, name string) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	root, prefix := "", false
	for first := true; ; first = false {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		n := path.Clean(hdr.Name)
		if path.IsAbs(n) || n == ".." || strings.HasPrefix(n, "../") {
			return fmt.Errorf("archive entry %q is outside the archive", hdr.Name)
		}
		top, rest, _ := strings.Cut(n, "/")
		if first {
			root, prefix = top, n == "."
		}
		switch {
		case prefix:
			n = path.Join(name, n)
		case top != root:
			return fmt.Errorf("archive has several top-level entries (%q, %q): copy into a directory", root, top)
		case rest == "":
			n = name
		default:
			n = name + "/" + rest
		}
		if hdr.Typeflag == tar.TypeDir {
			n += "/"
		}
		hdr.Name = n
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	return tw.Close()
}
