package manager

import (
	"encoding/json"
	"maps"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/record"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/store"
)

// Sandbox is the manager's view of one sandbox.
type Sandbox struct {
	id string // the API id, "sb-" + the runtime's id

	mu     sync.Mutex
	rec    store.Sandbox
	spec   specRecord
	rt     runtime.Sandbox // nil once final
	egress *egress.Gateway // serves the sandbox's proxies when its policy has network access
	// egressEnv is what its processes need for the gateway: trust
	// variables and credential placeholders (not stored: rebuilt from the
	// egress directory at restart).
	egressEnv map[string]string
	// recorder writes its activity record (spec.Record) while it runs.
	recorder *record.Recorder
	// procs are its processes that are running and the newest
	// keepFinishedProcs that finished (finished: their ids, oldest end
	// first); older finished processes are in the store only (dropped).
	procs    map[uint64]*proc
	finished []uint64
	dropped  bool          // some finished process is in the store only
	running  int           // processes started and not yet exited
	ending   bool          // being stopped, failed or deleted
	deleting bool          // ending because a caller deleted it
	ended    chan struct{} // closed once it is final
	activity time.Time
	dirty    bool // activity not yet written to the store
	// sleepFor is the activity after which it was last asked to sleep;
	// asleep, that it sleeps since (until the next activity).
	sleepFor   time.Time
	sleepRetry time.Time // not asked again before
	asleep     bool
	// cloned: its workspace volume was made as a clone of
	// spec.FromSnapshot's image (snapshot_cow.go).
	cloned bool
}

// specRecord is what the store keeps about how a sandbox was made (the
// store's opaque Spec).
type specRecord struct {
	Image      string            `json:"image,omitempty"`
	PolicyName string            `json:"policy_name,omitempty"`
	Policy     string            `json:"policy,omitempty"`
	Resources  api.Resources     `json:"resources,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	// Caches are the request's caches, on top of the policy's.
	Caches []string `json:"caches,omitempty"`
	// Network replaces the policy's network section's fields it holds
	// (the last PUT .../network/policy); nil: as created.
	Network *api.NetworkPolicy `json:"network,omitempty"`
	// Record: the sandbox has an activity record.
	Record bool `json:"record,omitempty"`
	// FromSnapshot: the snapshot the workspace was made from or last
	// restored to (snapshot.go).
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// Runtime is the sandbox's backend ("native", "gvisor"); "" in
	// records from before there was a choice: native.
	Runtime string `json:"runtime,omitempty"`
}

func (s specRecord) marshal() []byte {
	b, _ := json.Marshal(s)
	return b
}

// runtimeID is the runtime's id of an API sandbox id.
func runtimeID(id string) string { return id[len("sb-"):] }

// apiID is the API id of a runtime sandbox id.
func apiID(rid string) string { return "sb-" + rid }

// isFinal reports a stopped or failed sandbox. Call with sb.mu held.
func (sb *Sandbox) isFinal() bool {
	return sb.rec.State == api.StateStopped || sb.rec.State == api.StateFailed
}

// touch records API activity.
func (sb *Sandbox) touch(now time.Time) {
	sb.mu.Lock()
	sb.activity = now
	sb.dirty = true
	sb.asleep = false
	sb.mu.Unlock()
}

// view is the API's picture of the sandbox. Call with sb.mu held.
func (sb *Sandbox) view() api.Sandbox {
	r := &sb.rec
	v := api.Sandbox{
		ID: sb.id, State: r.State, Labels: maps.Clone(r.Labels), Image: sb.spec.Image,
		Policy: sb.spec.PolicyName, Reason: r.Reason, CreatedAt: r.CreatedAt,
		ExpiresAt: r.ExpiresAt, EndedAt: r.EndedAt, LastActivityAt: sb.activity,
		IdleTimeoutSeconds: r.IdleTimeout.Seconds(), Resources: sb.spec.Resources,
		Tenant: r.Tenant, Record: sb.spec.Record, Runtime: sb.spec.Runtime,
	}
	if v.Runtime == "" {
		v.Runtime = "native"
	}
	if sb.spec.Policy != "" {
		v.Policy = "inline"
	}
	if len(v.Labels) == 0 {
		v.Labels = nil
	}
	return v
}

// stateWord is the sandbox's state for an error message: "ending" while it
// is being deleted or has failed but its record still says running (the
// record becomes final once the runtime is gone), and what a restore that
// remakes its runtime is doing meanwhile. Called with sb.mu held.
func (sb *Sandbox) stateWord() string {
	live := sb.rec.State == api.StateRunning || sb.rec.State == api.StatePaused
	switch {
	case sb.ending && live:
		return "ending"
	case sb.rt == nil && live:
		return "being made anew (a restore)"
	}
	return sb.rec.State
}
