package policy

import (
	"strconv"

	"gopkg.in/yaml.v3"
)

// Marshal returns p as a policy file that parses back to the same policy
// (host paths are written as they are, so use absolute ones). Zero values
// are left out; sizes are written in binary units when exact.
func (p *Policy) Marshal() ([]byte, error) {
	type bind struct {
		Source string `yaml:"source"`
		Target string `yaml:"target"`
		Mode   string `yaml:"mode"`
	}
	type protect struct {
		Add    []string `yaml:"add,omitempty"`
		Remove []string `yaml:"remove,omitempty"`
	}
	type filesystem struct {
		ReadOnly []string `yaml:"read_only,omitempty"`
		Writable []string `yaml:"writable,omitempty"`
		Deny     []string `yaml:"deny,omitempty"`
		Binds    []bind   `yaml:"binds,omitempty"`
		Protect  *protect `yaml:"protect,omitempty"`
	}
	type resources struct {
		Memory  string `yaml:"memory,omitempty"`
		Swap    string `yaml:"swap,omitempty"`
		Pids    int64  `yaml:"pids,omitempty"`
		CPU     string `yaml:"cpu,omitempty"`
		Timeout string `yaml:"timeout,omitempty"`
		Disk    string `yaml:"disk,omitempty"`
		Tmp     string `yaml:"tmp,omitempty"`
		Shm     string `yaml:"shm,omitempty"`
		NoFile  uint64 `yaml:"nofile,omitempty"`
		FSize   string `yaml:"fsize,omitempty"`
	}
	type environment struct {
		Set  map[string]string `yaml:"set,omitempty"`
		Pass []string          `yaml:"pass,omitempty"`
	}
	type sec struct {
		Deny []string `yaml:"deny,omitempty"`
	}
	type httpRule struct {
		Hosts   []string `yaml:"hosts,omitempty"`
		Methods []string `yaml:"methods,omitempty"`
		Paths   []string `yaml:"paths,omitempty"`
	}
	type credential struct {
		Name   string   `yaml:"name,omitempty"`
		Hosts  []string `yaml:"hosts,omitempty"`
		Secret string   `yaml:"secret,omitempty"`
		Env    string   `yaml:"env,omitempty"`
		Header string   `yaml:"header,omitempty"`
		Format string   `yaml:"format,omitempty"`
	}
	type network struct {
		Mode        string       `yaml:"mode,omitempty"`
		Allow       []string     `yaml:"allow,omitempty"`
		Deny        []string     `yaml:"deny,omitempty"`
		HTTP        []httpRule   `yaml:"http,omitempty"`
		Credentials []credential `yaml:"credentials,omitempty"`
		MaxConns    int          `yaml:"max_connections,omitempty"`
		MaxBytes    string       `yaml:"max_bytes,omitempty"`
	}
	type file struct {
		Image       string       `yaml:"image,omitempty"`
		Workspace   any          `yaml:"workspace,omitempty"`
		Runtime     string       `yaml:"runtime,omitempty"`
		Filesystem  *filesystem  `yaml:"filesystem,omitempty"`
		Resources   *resources   `yaml:"resources,omitempty"`
		Environment *environment `yaml:"environment,omitempty"`
		Seccomp     *sec         `yaml:"seccomp,omitempty"`
		Network     *network     `yaml:"network,omitempty"`
		Caches      []string     `yaml:"caches,omitempty"`
	}
	size := func(n int64) string {
		if n == 0 {
			return ""
		}
		return FormatSize(n)
	}
	f := file{Image: p.Image, Runtime: p.Runtime, Caches: p.Caches}
	switch {
	case p.WorkspaceMode != "":
		type workspace struct {
			Path string `yaml:"path,omitempty"`
			Mode string `yaml:"mode"`
		}
		f.Workspace = workspace{p.Workspace, p.WorkspaceMode}
	case p.Workspace != "":
		f.Workspace = p.Workspace
	}
	fs := p.Filesystem
	if len(fs.ReadOnly)+len(fs.Writable)+len(fs.Deny)+len(fs.Binds)+len(fs.Protect.Add)+len(fs.Protect.Remove) > 0 {
		f.Filesystem = &filesystem{ReadOnly: fs.ReadOnly, Writable: fs.Writable, Deny: fs.Deny}
		for _, b := range fs.Binds {
			m := "ro"
			if b.Writable {
				m = "rw"
			}
			f.Filesystem.Binds = append(f.Filesystem.Binds, bind{b.Source, b.Target, m})
		}
		if len(fs.Protect.Add)+len(fs.Protect.Remove) > 0 {
			f.Filesystem.Protect = &protect{fs.Protect.Add, fs.Protect.Remove}
		}
	}
	if r := p.Resources; r != (Resources{}) {
		f.Resources = &resources{
			Memory: size(r.Memory), Swap: size(r.Swap), Pids: r.Pids,
			Disk: size(r.Disk), Tmp: size(r.Tmp), Shm: size(r.Shm),
			NoFile: r.NoFile, FSize: size(r.FileSize),
		}
		if r.CPU != 0 {
			f.Resources.CPU = strconv.FormatFloat(r.CPU, 'f', -1, 64)
		}
		if r.Timeout != 0 {
			f.Resources.Timeout = r.Timeout.String()
		}
	}
	if len(p.Environment.Set)+len(p.Environment.Pass) > 0 {
		f.Environment = &environment{p.Environment.Set, p.Environment.Pass}
	}
	if len(p.Seccomp.Deny) > 0 {
		f.Seccomp = &sec{p.Seccomp.Deny}
	}
	if n := p.Network; n.Mode != "" || len(n.Allow)+len(n.Deny)+len(n.HTTP)+len(n.Credentials) > 0 || n.MaxConnections != 0 || n.MaxBytes != 0 {
		f.Network = &network{Mode: n.Mode, Allow: n.Allow, Deny: n.Deny, MaxConns: n.MaxConnections, MaxBytes: size(n.MaxBytes)}
		for _, r := range n.HTTP {
			f.Network.HTTP = append(f.Network.HTTP, httpRule(r))
		}
		for _, c := range n.Credentials {
			f.Network.Credentials = append(f.Network.Credentials, credential(c))
		}
	}
	return yaml.Marshal(&f)
}
