package native

// Helpers other backends (internal/runtime/gvisor) share with this one, so
// that the same policy gives the same view of the host on every backend.

// HostSystemDirs lists the host directories (or symlinks to them) that make
// up a sandbox's root filesystem when the spec names no image.
func HostSystemDirs() []string { return append([]string(nil), hostSystemDirs...) }

// EtcCache returns the shared directory holding the sandbox's /etc (the
// selected host entries), built once per state of the host's /etc under
// stateRoot.
func EtcCache(stateRoot string) (string, error) { return etcCache(stateRoot) }

// NewID returns a fresh sandbox id (16 lowercase hex digits).
func NewID() string { return newID() }

// IsID reports whether id is a valid sandbox id.
func IsID(id string) bool { return isID(id) }

// Sweep clears what dead supervisors left under stateRoot (their
// sandboxes' state, cgroups), as the next Create would: for a command that
// must know a killed run's sandbox is gone (airlock review apply).
func Sweep(stateRoot string) { sweep(stateRoot, nil) }
