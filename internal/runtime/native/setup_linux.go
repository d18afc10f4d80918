package native

import "github.com/airlock-dev/airlock/internal/runtime"

// setup is what the supervisor sends the sandbox's init in the first control
// message. It is built by the supervisor from a runtime.Spec, so the init
// needs no policy logic of its own.
type setup struct {
	StateDir string `json:"state_dir"`
	Image    string `json:"image,omitempty"`
	// Etc is the host directory with the sandbox's /etc (the etc cache),
	// used when Image is empty.
	Etc       string `json:"etc,omitempty"`
	Workspace string `json:"workspace"`
	// WorkspaceLayer: the workspace is an overlay with Workspace as its
	// read-only lower layer and this directory's upper/ and work/ (see
	// runtime.Spec.WorkspaceLayer). Attached idmapped as
	// "workspace-layer" by a root supervisor.
	WorkspaceLayer string `json:"workspace_layer,omitempty"`
	// WorkspaceVolatile: mount that overlay volatile
	// (runtime.Spec.WorkspaceLayerVolatile).
	WorkspaceVolatile bool `json:"workspace_volatile,omitempty"`
	// Protect the workspace paths listed (relative) by mounting them
	// read-only, creating placeholders for paths that do not exist.
	Protected []string `json:"protected,omitempty"`
	// IDMapped names, in order, the file descriptors that came with the
	// setup message: detached, idmapped mounts made by a root supervisor.
	// Names are "/usr"-style host paths, "image" or "workspace".
	IDMapped []string `json:"idmapped,omitempty"`
	// Mounts are the extra bind mounts (read_only, writable and binds of
	// the policy), in order. The supervisor opens each source itself and
	// passes it as a detached mount named "bind:<index>", so that a source
	// only root can reach still works when root inside is unprivileged.
	Mounts []bindMount `json:"mounts,omitempty"`
	Deny   []string    `json:"deny,omitempty"`

	// WorkspaceTmpfs: the workspace is a fresh tmpfs of Disk bytes that
	// the init mounts (no host directory).
	WorkspaceTmpfs bool `json:"workspace_tmpfs,omitempty"`

	Hostname string `json:"hostname"`
	Disk     int64  `json:"disk"`
	Tmp      int64  `json:"tmp"`
	Shm      int64  `json:"shm"`
	NoFile   uint64 `json:"nofile"`
	FileSize int64  `json:"fsize"`

	// Detached: the last descriptor is a listening socket on which the
	// agent waits for the next supervisor if its channel closes, instead of
	// ending the sandbox (for a daemon that restarts).
	Detached bool `json:"detached,omitempty"`

	// Sleep: two descriptors follow the idmapped ones, the sleeper's
	// program (airlock-pid1) and the agent's own, executable from inside
	// the sandbox (sealed memfds): the agent may sleep (sleep_linux.go).
	Sleep bool `json:"sleep,omitempty"`

	// Listen: TCP addresses the init binds inside the sandbox's network
	// namespace and hands to the supervisor with the ready message.
	Listen []string `json:"listen,omitempty"`

	// ExecNotify: install seccomp.ExecNotifyFilter before the policy's
	// filter and send its listener as the last descriptor of the ready
	// message (runtime.Spec.RecordExec).
	ExecNotify bool `json:"exec_notify,omitempty"`

	Seccomp    runtime.Program `json:"seccomp,omitempty"`
	NoSeccomp  bool            `json:"no_seccomp,omitempty"`
	NoLandlock bool            `json:"no_landlock,omitempty"`
}

// bindMount is one extra bind mount.
type bindMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	Writable bool   `json:"writable,omitempty"`
	Dir      bool   `json:"dir"`
}

// Layer names used in errors, so that a failure says which isolation layer
// could not be applied.
const (
	layerNamespaces = "namespaces"
	layerFilesystem = "filesystem"
	layerWorkspace  = "workspace overlay"
	layerDisk       = "disk quota"
	layerCgroups    = "cgroups"
	layerRlimits    = "rlimits"
	layerCaps       = "capabilities"
	layerLandlock   = "landlock"
	layerSeccomp    = "seccomp"
	layerRecord     = "record"
)

// hostSystemDirs are the host directories that make up the default root,
// read-only beneath a copy-on-write layer. Symlinks (merged /usr) are
// recreated as symlinks.
var hostSystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// InitArg is the hidden subcommand that makes the airlock binary act as a
// sandbox's init. cmd/airlock dispatches on it before anything else runs.
const InitArg = "__sandbox-init"
