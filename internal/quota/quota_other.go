//go:build !linux

package quota

import "errors"

// ErrUnsupported is returned on operating systems other than Linux.
var ErrUnsupported = errors.New("disk quotas for sandboxes need Linux (loop devices, ext4)")

// Volumes makes capped volumes; it needs Linux.
type Volumes struct{}

// Open fails on operating systems other than Linux.
func Open(dir, kind string, reserve int64) (*Volumes, error) { return nil, ErrUnsupported }

func (vs *Volumes) Kind() string   { return "" }
func (vs *Volumes) Dir() string    { return "" }
func (vs *Volumes) Reserve() int64 { return 0 }
func (vs *Volumes) String() string { return "none" }

// Create fails on operating systems other than Linux.
func (vs *Volumes) Create(name string, size int64, uid, gid int) (*Volume, error) {
	return nil, ErrUnsupported
}

// Remove fails on operating systems other than Linux.
func (vs *Volumes) Remove(name string) error { return ErrUnsupported }

// Sweep does nothing on operating systems other than Linux.
func (vs *Volumes) Sweep(keep func(name string) bool) {}

// Remove fails on operating systems other than Linux.
func (v *Volume) Remove() error { return ErrUnsupported }

// OpenWith fails on operating systems other than Linux.
func OpenWith(dir string, o Options) (*Volumes, error) { return nil, ErrUnsupported }

func (vs *Volumes) Method() string                 { return MethodCopy }
func (vs *Volumes) CopyOnWriteInfo() string        { return ErrUnsupported.Error() }
func (vs *Volumes) Close() error                   { return nil }
func (vs *Volumes) SnapshotImage(id string) string { return "" }
func (vs *Volumes) SnapshotIDs() []string          { return nil }

// Snapshot fails on operating systems other than Linux.
func (vs *Volumes) Snapshot(name, id string) (used, files int64, err error) {
	return 0, 0, ErrUnsupported
}

// RemoveSnapshot fails on operating systems other than Linux.
func (vs *Volumes) RemoveSnapshot(id string) error { return ErrUnsupported }

// CreateFrom fails on operating systems other than Linux.
func (vs *Volumes) CreateFrom(name string, size int64, id string) (*Volume, error) {
	return nil, ErrUnsupported
}

// MountSnapshot fails on operating systems other than Linux.
func (vs *Volumes) MountSnapshot(id, at string) (func() error, error) { return nil, ErrUnsupported }

// PlanCopyOnWrite: snapshots copy on operating systems other than Linux.
func PlanCopyOnWrite(dir, pool string) (method, detail string) {
	return MethodCopy, ErrUnsupported.Error()
}

// Spares: none on operating systems other than Linux.
func (vs *Volumes) Spares() map[int64]int { return nil }
