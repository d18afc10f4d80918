package api

// Route is one operation of the API. Paths use Go's net/http pattern syntax
// ({id}); the OpenAPI document lists exactly these (a test checks both ways).
type Route struct {
	Method, Path, Op string
}

// Routes lists every operation, in the order of the OpenAPI document.
//
// Unless noted, bodies are JSON, answers are JSON, and errors are an Error
// with the status of its code. Sandbox ids are "sb-" + 16 lowercase hex
// digits, process ids "p" + a decimal number; anything else is a 404.
var Routes = []Route{
	// Unauthenticated operations.
	{"GET", "/healthz", "health"},  // 200 "ok" while the process serves
	{"GET", "/readyz", "ready"},    // 200 once state is loaded and sandboxes re-adopted; 503 before and while draining
	{"GET", "/metrics", "metrics"}, // Prometheus text format
	{"GET", "/v1/openapi.json", "openapi"},

	// Sandboxes.
	{"POST", "/v1/sandboxes", "createSandbox"},           // CreateSandboxRequest -> 201 Sandbox
	{"GET", "/v1/sandboxes", "listSandboxes"},            // -> SandboxList
	{"GET", "/v1/sandboxes/{id}", "getSandbox"},          // -> Sandbox
	{"DELETE", "/v1/sandboxes/{id}", "deleteSandbox"},    // -> 204; kills it and forgets it
	{"POST", "/v1/sandboxes/{id}/timeout", "setTimeout"}, // TimeoutRequest -> Sandbox
	{"POST", "/v1/sandboxes/{id}/pause", "pauseSandbox"}, // -> Sandbox (409 unless running)
	{"POST", "/v1/sandboxes/{id}/resume", "resumeSandbox"},

	// Processes.
	{"POST", "/v1/sandboxes/{id}/exec", "exec"},                 // ExecRequest -> ExecResult (waits)
	{"POST", "/v1/sandboxes/{id}/processes", "startProcess"},    // ExecRequest -> 201 Process
	{"GET", "/v1/sandboxes/{id}/processes", "listProcesses"},    // -> ProcessList
	{"GET", "/v1/sandboxes/{id}/processes/{pid}", "getProcess"}, // -> Process
	// ?timeout_seconds=N (default 30, max 300): -> Process, exited or still
	// running when the wait timed out.
	{"GET", "/v1/sandboxes/{id}/processes/{pid}/wait", "waitProcess"},
	// Accept: application/x-ndjson (default) or text/event-stream.
	// ?cursor=C resumes (or Last-Event-ID for SSE); ?follow=false returns
	// what is there now and ends. Streams OutputEvents until "exit".
	{"GET", "/v1/sandboxes/{id}/processes/{pid}/output", "processOutput"},
	// Raw body (application/octet-stream) appended to stdin; ?close=true
	// closes stdin after it. -> 204; 409 for data to a process that has
	// exited (an empty close of one is 204: its stdin reads no more).
	{"POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", "writeStdin"},
	{"POST", "/v1/sandboxes/{id}/processes/{pid}/signal", "signalProcess"}, // SignalRequest -> 204
	// WebSocket; see PTYStart.
	{"GET", "/v1/sandboxes/{id}/pty", "pty"},

	// Network (egress). ?allowed=true|false, ?problems=true, ?host=H, ?since=RFC3339,
	// ?cursor=C, ?limit=N -> NetworkEventsPage; ?follow=true streams
	// NetworkEvents instead (Accept: application/x-ndjson, the default, or
	// text/event-stream with Last-Event-ID) until the sandbox ends.
	{"GET", "/v1/sandboxes/{id}/network", "networkEvents"},
	{"GET", "/v1/sandboxes/{id}/network/policy", "getNetworkPolicy"}, // -> NetworkPolicy
	// NetworkPolicy -> NetworkPolicy; 400 for a bad rule, 409 for a mode
	// other than none on a sandbox created without network.
	{"PUT", "/v1/sandboxes/{id}/network/policy", "setNetworkPolicy"},
	// Connection: Upgrade, Upgrade: tcp -> 101, then a raw TCP stream to
	// 127.0.0.1:{port} inside the sandbox (dialled from outside into its
	// network namespace).
	{"GET", "/v1/sandboxes/{id}/ports/{port}", "portTunnel"},

	// Activity record (sandboxes made with record: true; others 409).
	// ?type=T, ?since=RFC3339, ?cursor=C, ?limit=N -> RecordEventsPage;
	// ?follow=true streams RecordEvents like .../network.
	{"GET", "/v1/sandboxes/{id}/events", "recordEvents"},

	// Files. ?path= is absolute in the sandbox or relative to /workspace.
	{"GET", "/v1/sandboxes/{id}/files", "readFile"},     // -> raw content, HeaderFileSize, HeaderFileMode
	{"PUT", "/v1/sandboxes/{id}/files", "writeFile"},    // raw body, ?mode=0644 (octal) -> 204; atomic
	{"DELETE", "/v1/sandboxes/{id}/files", "remove"},    // ?recursive=true -> 204
	{"GET", "/v1/sandboxes/{id}/files/stat", "stat"},    // -> FileInfo
	{"GET", "/v1/sandboxes/{id}/files/list", "list"},    // -> FileList
	{"POST", "/v1/sandboxes/{id}/files/mkdir", "mkdir"}, // MkdirRequest -> 204
	{"POST", "/v1/sandboxes/{id}/files/rename", "rename"},
	{"GET", "/v1/sandboxes/{id}/archive", "download"}, // -> application/x-tar of path (a file or a tree)
	{"PUT", "/v1/sandboxes/{id}/archive", "upload"},   // tar body extracted into directory path -> 204

	// Snapshots of a sandbox's workspace (native runtime; processes are not
	// captured). CreateSnapshotRequest -> 201 Snapshot (409 for a name in
	// use, 409 past the daemon's snapshot_quota).
	{"POST", "/v1/sandboxes/{id}/snapshots", "createSnapshot"},
	{"GET", "/v1/snapshots", "listSnapshots"},            // -> SnapshotList (the caller's tenant's)
	{"GET", "/v1/snapshots/{snap}", "getSnapshot"},       // id or name -> Snapshot
	{"DELETE", "/v1/snapshots/{snap}", "deleteSnapshot"}, // -> 204
	// ForkRequest -> 201 ForkResult: a snapshot and count sandboxes made
	// from it (429 past admission, and nothing made).
	{"POST", "/v1/sandboxes/{id}/fork", "forkSandbox"},
	// RestoreRequest -> Sandbox: the workspace back to the snapshot, in
	// place (same id, policy, network audit); its processes are killed.
	{"POST", "/v1/sandboxes/{id}/restore", "restoreSandbox"},
	// ?since=SNAPSHOT (default: since creation), ?diff=true -> Changes
	{"GET", "/v1/sandboxes/{id}/changes", "sandboxChanges"},

	// API keys: only over the unix socket (403 over TCP).
	{"POST", "/v1/keys", "createKey"}, // CreateKeyRequest -> 201 APIKey with Key set
	{"GET", "/v1/keys", "listKeys"},   // -> KeyList
	{"DELETE", "/v1/keys/{kid}", "revokeKey"},
}

// Pattern is the route's net/http ServeMux pattern.
func (r Route) Pattern() string { return r.Method + " " + r.Path }
