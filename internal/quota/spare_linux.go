package quota

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// Spare volumes.
//
// Making a volume (a clone of the blank image, a loop device, an ext4
// mount) takes 2-4 ms here, most of it the loop device's configuration
// and the mount's reads through it. With Options.Spares, Volumes keeps
// that many volumes ready for each of the last few sizes Create was asked
// for, made in the background, and Create hands one over: its image is
// renamed to the volume's name, its filesystem bind-mounted on the
// volume's directory and its root given to the owner, which takes a few
// hundred microseconds. A spare is a volume like any other for the
// reserve (its size is promised when it is made), and is cloned from the
// blank only: without reflinks (mkfs per volume) there are none.
//
// Spares are named .spare-PID-BOOT-N (a dot: never a sandbox's volume)
// after the process that made them and the host's boot (the first 8 hex
// digits of its boot id: after a restart the same PID may be anyone's).
// Close removes them; Open removes those of another boot, of a process
// that is gone and its own process's (left by an earlier process of that
// PID); Sweep those of another boot or of a process that is gone.

const (
	sparePrefix = ".spare-"
	// spareSizes is how many volume sizes have spares at once: the least
	// recently asked for loses its spares to a new one.
	spareSizes = 3
)

type spares struct {
	mu     sync.Mutex
	keep   int                 // spares kept per size (0: none)
	ready  map[int64][]*Volume // by size
	making map[int64]int       // by size: being made
	order  []int64             // sizes, the most recently asked for last
	seq    int
	closed bool
	wg     sync.WaitGroup
}

// Spares reports the spare volumes ready now, by size in bytes.
func (vs *Volumes) Spares() map[int64]int {
	vs.spare.mu.Lock()
	defer vs.spare.mu.Unlock()
	out := make(map[int64]int, len(vs.spare.ready))
	for size, l := range vs.spare.ready {
		out[size] = len(l)
	}
	return out
}

// takeSpare makes a ready spare of size the volume name, its root owned
// by uid:gid, and starts making its replacement. nil: there was none, or
// handing it over failed (the spare is gone, and the caller makes the
// volume the long way, which reports any error).
func (vs *Volumes) takeSpare(name string, size int64, uid, gid int) *Volume {
	s := &vs.spare
	s.mu.Lock()
	if s.keep == 0 || s.closed {
		s.mu.Unlock()
		return nil
	}
	s.use(size)
	var sp *Volume
	if l := s.ready[size]; len(l) > 0 {
		sp, s.ready[size] = l[len(l)-1], l[:len(l)-1]
	}
	s.mu.Unlock()
	defer vs.refill(size)
	if sp == nil {
		return nil
	}
	v := vs.volume(name, size)
	if err := handOver(sp, v, uid, gid); err != nil {
		sp.Remove()
		return nil
	}
	return v
}

// handOver makes the mounted spare sp the volume v: its image renamed
// (never over an existing one), its filesystem bind-mounted on v's new
// directory, the spare's own mount and directory removed.
func handOver(sp, v *Volume, uid, gid int) error {
	if err := unix.Renameat2(unix.AT_FDCWD, sp.Image, unix.AT_FDCWD, v.Image, unix.RENAME_NOREPLACE); err != nil {
		if err == unix.EEXIST {
			return fmt.Errorf("volume %s: %w", v.Path, errdefs.ErrExists)
		}
		return fmt.Errorf("volume image: %w", err)
	}
	undo := func() { os.Rename(v.Image, sp.Image) }
	if err := os.Mkdir(v.Path, 0o700); err != nil {
		undo()
		return fmt.Errorf("volume mount point: %w", err)
	}
	// A bind mount keeps the spare mount's nosuid and nodev.
	if err := unix.Mount(sp.Path, v.Path, "", unix.MS_BIND, ""); err != nil {
		os.Remove(v.Path)
		undo()
		return fmt.Errorf("mount %s on %s: %w", sp.Path, v.Path, err)
	}
	if err := os.Chown(v.Path, uid, gid); err != nil {
		unix.Unmount(v.Path, unix.MNT_DETACH)
		os.Remove(v.Path)
		undo()
		return fmt.Errorf("volume %s: %w", v.Path, err)
	}
	// The spare's own mount goes; the filesystem stays mounted on v.Path.
	unix.Unmount(sp.Path, unix.MNT_DETACH)
	os.Remove(sp.Path)
	return nil
}

// use marks size as the most recently asked for; a size beyond the last
// spareSizes loses its spares. s.mu is held.
func (s *spares) use(size int64) {
	if i := indexOf(s.order, size); i >= 0 {
		s.order = append(s.order[:i], s.order[i+1:]...)
	}
	s.order = append(s.order, size)
	for len(s.order) > spareSizes {
		old := s.order[0]
		s.order = s.order[1:]
		for _, sp := range s.ready[old] {
			s.wg.Add(1) // Close waits for it, before it unmounts the pool
			go func() {
				defer s.wg.Done()
				sp.Remove()
			}()
		}
		delete(s.ready, old)
	}
}

func indexOf(l []int64, x int64) int {
	for i, y := range l {
		if y == x {
			return i
		}
	}
	return -1
}

// refill starts making spares of size until s.keep are ready or being
// made (one at a time per size).
func (vs *Volumes) refill(size int64) {
	s := &vs.spare
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !vs.cow || s.making[size] > 0 || len(s.ready[size]) >= s.keep || indexOf(s.order, size) < 0 {
		return
	}
	s.making[size]++
	s.seq++
	name := sparePrefix + strconv.Itoa(os.Getpid()) + "-" + bootID() + "-" + strconv.Itoa(s.seq)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		v, err := vs.create(name, size, 0, 0, true)
		s.mu.Lock()
		s.making[size]--
		keep := err == nil && !s.closed && indexOf(s.order, size) >= 0
		if keep {
			s.ready[size] = append(s.ready[size], v)
		}
		s.mu.Unlock()
		switch {
		case err != nil:
			return // no room, say: Create makes its volumes itself
		case !keep:
			v.Remove()
		default:
			vs.refill(size)
		}
	}()
}

// dropSpares removes every ready spare (they hold space a volume of
// another size may need).
func (vs *Volumes) dropSpares() bool {
	s := &vs.spare
	s.mu.Lock()
	var all []*Volume
	for size, l := range s.ready {
		all = append(all, l...)
		delete(s.ready, size)
	}
	s.mu.Unlock()
	for _, sp := range all {
		sp.Remove()
	}
	return len(all) > 0
}

// closeSpares stops making spares and removes them.
func (vs *Volumes) closeSpares() {
	s := &vs.spare
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	vs.dropSpares()
}

// bootID is the first 8 hex digits of the host's boot id ("0" when it
// cannot be read).
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if id := strings.ReplaceAll(strings.TrimSpace(string(b)), "-", ""); err == nil && len(id) >= 8 {
		return id[:8]
	}
	return "0"
})

// spareOwner is the process that made the spare (or test volume) with
// this name and the boot it was made in ("" for a test volume); ok false
// for a name that is neither.
func spareOwner(name string) (pid int, boot string, ok bool) {
	if rest, found := strings.CutPrefix(name, sparePrefix); found {
		p, rest, _ := strings.Cut(rest, "-")
		boot, _, _ = strings.Cut(rest, "-")
		n, err := strconv.Atoi(p)
		return n, boot, err == nil
	}
	if rest, found := strings.CutPrefix(name, ".probe-"); found {
		n, err := strconv.Atoi(rest)
		return n, "", err == nil
	}
	return 0, "", false
}

// removeOrphans removes the spares and test volumes of processes that are
// gone, and spares of another boot. atOpen, this process's own are
// removed too: it has made none yet, so they are an earlier process's of
// the same PID.
func (vs *Volumes) removeOrphans(atOpen bool) {
	entries, err := os.ReadDir(vs.dir)
	if err != nil {
		return
	}
	done := map[string]bool{}
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".img")
		pid, boot, ok := spareOwner(name)
		if !ok || done[name] {
			continue
		}
		done[name] = true
		stale := unix.Kill(pid, 0) == unix.ESRCH ||
			strings.HasPrefix(name, sparePrefix) && (boot != bootID() || atOpen && pid == os.Getpid())
		if stale {
			p := filepath.Join(vs.dir, name)
			(&Volume{Kind: KindLoop, Path: p, Image: p + ".img"}).Remove()
		}
	}
}
