// The Airlock client: one method per operation of the API (named after its
// operationId in api/openapi.json), plus streaming and tree helpers. The
// objects are the API's JSON (snake_case, as in src/models.ts), except
// that bytes are Buffers (or, as input, strings or Uint8Arrays).

import "./polyfill.js";
import { InvalidArgumentError, TooLargeError, apiError } from "./errors.js";
import { DEFAULT_MAX_DOWNLOAD, type DownloadOptions, type Extracted, extractDownload, untarTo } from "./extract.js";
import type * as M from "./models.js";
import { decodeEvent, guardBody, rawEvents, reconnecting } from "./stream.js";
import { tarDir } from "./tar.js";
import { type Body, type CallOptions, type ClientOptions, Transport, headerOne, readBody } from "./transport.js";
import type { Duplex } from "node:stream";
import { Pty, type PtyOptions, openUpgrade, openWebSocket } from "./ws.js";

/** Bytes as input: a string (UTF-8) or a Uint8Array (a Buffer). */
export type Bytes = string | Uint8Array;

/** A file to write at creation; relative paths are under /workspace. */
export interface FileInput {
  path: string;
  content: Bytes;
  mode?: number;
}

/** The body of createSandbox, with file contents as bytes. */
export interface CreateSandboxInput extends Omit<M.CreateSandboxRequest, "files"> {
  files?: FileInput[];
}

/** The options of exec and startProcess (an ExecRequest without argv, stdin as bytes). */
export interface ExecOptions extends Omit<M.ExecRequest, "argv" | "stdin"> {
  stdin?: Bytes;
}

/** The result of exec, its output as Buffers. */
export interface ExecOutput extends Omit<M.ExecResult, "stdout" | "stderr"> {
  stdout: Buffer;
  stderr: Buffer;
}

/** An event of a process's output, its data as a Buffer. */
export interface OutputChunk extends Omit<M.OutputEvent, "data"> {
  data?: Buffer;
}

/** Filters of listSandboxes. */
export interface SandboxFilter {
  /** Only sandboxes in one of these states. */
  state?: M.Sandbox["state"] | Array<M.Sandbox["state"]>;
  /** Only sandboxes with all these labels. */
  labels?: Record<string, string>;
  limit?: number;
  cursor?: string;
}

/** What networkEvents and followNetwork select. */
export interface NetworkQuery {
  allowed?: boolean;
  /** Only the records a rule denied and those that failed before any byte moved. */
  problems?: boolean;
  host?: string;
  since?: Date | string;
  cursor?: string;
  limit?: number;
}

/** What recordEvents and followEvents select. */
export interface EventsQuery {
  /** Only events of these types ("exec", "exit", ...). */
  type?: M.RecordEvent["type"] | Array<M.RecordEvent["type"]>;
  since?: Date | string;
  cursor?: string;
  limit?: number;
}

/** Options of processOutput. */
export interface OutputOptions extends CallOptions {
  /** Resume after this cursor (an event's cursor). */
  cursor?: string;
  /** Wait for more output until the process exits (default true); false returns what is there now. */
  follow?: boolean;
  /** Ask for Server-Sent Events instead of NDJSON (the same events). */
  sse?: boolean;
}

/** The query parameters each method sends, by operationId (the drift test compares it with the OpenAPI document). */
export const SENT_QUERY: { readonly [K in M.OperationId]: readonly string[] } = {
  health: [],
  ready: [],
  metrics: [],
  openapi: [],
  createSandbox: [],
  listSandboxes: ["state", "label", "limit", "cursor"],
  getSandbox: [],
  deleteSandbox: [],
  setTimeout: [],
  pauseSandbox: [],
  resumeSandbox: [],
  exec: [],
  startProcess: [],
  listProcesses: ["state"],
  getProcess: [],
  waitProcess: ["timeout_seconds"],
  processOutput: ["cursor", "follow"],
  writeStdin: ["close"],
  signalProcess: [],
  pty: [],
  networkEvents: ["allowed", "problems", "host", "since", "cursor", "limit", "follow"],
  recordEvents: ["type", "since", "cursor", "limit", "follow"],
  getNetworkPolicy: [],
  setNetworkPolicy: [],
  readFile: ["path", "max_size"],
  writeFile: ["path", "mode"],
  remove: ["path", "recursive"],
  stat: ["path"],
  list: ["path"],
  mkdir: [],
  rename: [],
  download: ["path", "max_size", "follow_links"],
  upload: ["path"],
  createKey: [],
  listKeys: [],
  revokeKey: [],
  portTunnel: [],
  createSnapshot: [],
  listSnapshots: [],
  getSnapshot: [],
  deleteSnapshot: [],
  forkSandbox: [],
  restoreSandbox: [],
  sandboxChanges: ["since", "diff"],
};

function query(op: M.OperationId, values: Record<string, string | string[] | undefined>): URLSearchParams {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(values)) {
    if (!SENT_QUERY[op].includes(k)) throw new Error(`airlock: internal: ${op} does not take ?${k}`);
    if (v === undefined) continue;
    for (const x of Array.isArray(v) ? v : [v]) q.append(k, x);
  }
  return q;
}

function seg(what: string, v: string): string {
  if (typeof v !== "string" || v === "") throw new InvalidArgumentError("invalid_argument", `empty ${what}`);
  return encodeURIComponent(v);
}

const sbPath = (id: string, rest = "") => `/v1/sandboxes/${seg("sandbox id", id)}${rest}`;
const pPath = (id: string, pid: string, rest = "") => sbPath(id, `/processes/${seg("process id", pid)}${rest}`);

function b64(b: Bytes | undefined): string | undefined {
  if (b === undefined) return undefined;
  return (typeof b === "string" ? Buffer.from(b, "utf8") : Buffer.from(b.buffer, b.byteOffset, b.byteLength)).toString("base64");
}

function unb64(s: string | null | undefined): Buffer {
  return s ? Buffer.from(s, "base64") : Buffer.alloc(0);
}

function filePath(p: string): string {
  if (typeof p !== "string" || p === "") throw new InvalidArgumentError("invalid_argument", "empty path");
  return p;
}

/** A client of one airlock daemon; safe for concurrent calls. */
export class Airlock {
  readonly transport: Transport;

  /** A client of the daemon at opts.host (default $AIRLOCK_HOST, else the local daemon's socket) with opts.apiKey (default $AIRLOCK_API_KEY). */
  constructor(opts: ClientOptions = {}) {
    this.transport = new Transport(opts);
  }

  /** A client from $AIRLOCK_HOST and $AIRLOCK_API_KEY. */
  static fromEnv(opts: Omit<ClientOptions, "host" | "apiKey"> = {}): Airlock {
    return new Airlock(opts);
  }

  /** The daemon's address. */
  get host(): string {
    return this.transport.host;
  }

  /** Closes idle connections (a client is still usable afterwards). */
  close(): void {
    this.transport.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }

  private get t(): Transport {
    return this.transport;
  }

  // Unauthenticated operations.

  /** Resolves when the daemon answers (GET /healthz). */
  async health(opts: CallOptions = {}): Promise<void> {
    await this.t.fetchBytes({ method: "GET", path: "/healthz", ...opts });
  }

  /** Resolves once the daemon has loaded its state (GET /readyz); UnavailableError before and while it drains. */
  async ready(opts: CallOptions = {}): Promise<void> {
    await this.t.fetchBytes({ method: "GET", path: "/readyz", ...opts });
  }

  /** The daemon's metrics, in the Prometheus text format. */
  async metrics(opts: CallOptions = {}): Promise<string> {
    return (await this.t.fetchBytes({ method: "GET", path: "/metrics", ...opts })).body.toString("utf8");
  }

  /** The daemon's OpenAPI document. */
  async openapi(opts: CallOptions = {}): Promise<Record<string, unknown>> {
    return this.t.json({ method: "GET", path: "/v1/openapi.json", ...opts });
  }

  // Sandboxes.

  /** Creates a sandbox and returns it running (its files written). */
  async createSandbox(req: CreateSandboxInput = {}, opts: CallOptions = {}): Promise<M.Sandbox> {
    const body: M.CreateSandboxRequest = { ...req, files: req.files?.map((f) => ({ path: f.path, content: b64(f.content)!, mode: f.mode })) };
    if (!req.files) delete body.files;
    return this.t.json({ method: "POST", path: "/v1/sandboxes", json: body, ...opts });
  }

  /** One page of sandboxes; pass next_cursor as cursor for the next. */
  async listSandboxes(filter: SandboxFilter = {}, opts: CallOptions = {}): Promise<M.SandboxList> {
    const states = filter.state === undefined ? undefined : Array.isArray(filter.state) ? filter.state : [filter.state];
    const labels = filter.labels ? Object.entries(filter.labels).map(([k, v]) => `${k}=${v}`) : undefined;
    const q = query("listSandboxes", { state: states, label: labels, limit: filter.limit?.toString(), cursor: filter.cursor });
    return this.t.json({ method: "GET", path: "/v1/sandboxes", query: q, ...opts });
  }

  /** Every sandbox the filter selects, page after page. */
  async *sandboxes(filter: Omit<SandboxFilter, "cursor"> = {}, opts: CallOptions = {}): AsyncGenerator<M.Sandbox> {
    let cursor: string | undefined;
    for (let i = 0; i < 100_000; i++) {
      const page = await this.listSandboxes({ ...filter, cursor }, opts);
      yield* page.sandboxes;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  async getSandbox(id: string, opts: CallOptions = {}): Promise<M.Sandbox> {
    return this.t.json({ method: "GET", path: sbPath(id), ...opts });
  }

  /** Kills the sandbox and forgets it. */
  async deleteSandbox(id: string, opts: CallOptions = {}): Promise<void> {
    await this.t.json({ method: "DELETE", path: sbPath(id), ...opts });
  }

  /** The sandbox now expires seconds from now (never past the daemon's maximum lifetime). */
  async setTimeout(id: string, seconds: number, opts: CallOptions = {}): Promise<M.Sandbox> {
    return this.t.json({ method: "POST", path: sbPath(id, "/timeout"), json: { timeout_seconds: seconds } satisfies M.TimeoutRequest, ...opts });
  }

  async pauseSandbox(id: string, opts: CallOptions = {}): Promise<M.Sandbox> {
    return this.t.json({ method: "POST", path: sbPath(id, "/pause"), ...opts });
  }

  async resumeSandbox(id: string, opts: CallOptions = {}): Promise<M.Sandbox> {
    return this.t.json({ method: "POST", path: sbPath(id, "/resume"), ...opts });
  }

  // Snapshots of a sandbox's /workspace (processes are not captured).

  /** Snapshots the sandbox's workspace, with its processes frozen during the copy. */
  async createSnapshot(id: string, req: M.CreateSnapshotRequest = {}, opts: CallOptions = {}): Promise<M.Snapshot> {
    return this.t.json({ method: "POST", path: sbPath(id, "/snapshots"), json: req, timeoutMs: this.longer(opts, 600), ...opts });
  }

  async listSnapshots(opts: CallOptions = {}): Promise<M.SnapshotList> {
    return this.t.json({ method: "GET", path: "/v1/snapshots", ...opts });
  }

  /** A snapshot by id or name. */
  async getSnapshot(snap: string, opts: CallOptions = {}): Promise<M.Snapshot> {
    return this.t.json({ method: "GET", path: `/v1/snapshots/${seg("snapshot", snap)}`, ...opts });
  }

  /** Deletes a snapshot (sandboxes made from it keep their copies). */
  async deleteSnapshot(snap: string, opts: CallOptions = {}): Promise<void> {
    await this.t.json({ method: "DELETE", path: `/v1/snapshots/${seg("snapshot", snap)}`, ...opts });
  }

  /** count sandboxes from a snapshot of the sandbox's current state, all or none. */
  async forkSandbox(id: string, req: M.ForkRequest = {}, opts: CallOptions = {}): Promise<M.ForkResult> {
    if (req.count !== undefined && !(Number.isInteger(req.count) && req.count >= 1)) {
      // The API reads a count of 0 as "not given": one sandbox.
      throw new InvalidArgumentError("invalid_argument", `count: ${req.count}: want 1 or more sandboxes`);
    }
    return this.t.json({ method: "POST", path: sbPath(id, "/fork"), json: req, timeoutMs: this.longer(opts, 600), ...opts });
  }

  /** Puts the sandbox's workspace back to a snapshot, in place; its processes are killed. */
  async restoreSandbox(id: string, snapshot: string, opts: CallOptions = {}): Promise<M.Sandbox> {
    return this.t.json({
      method: "POST", path: sbPath(id, "/restore"), json: { snapshot } satisfies M.RestoreRequest,
      timeoutMs: this.longer(opts, 600), ...opts,
    });
  }

  /** The workspace's changes since a snapshot (or since the sandbox's creation). */
  async sandboxChanges(id: string, q: { since?: string; diff?: boolean } = {}, opts: CallOptions = {}): Promise<M.Changes> {
    return this.t.json({
      method: "GET", path: sbPath(id, "/changes"),
      query: query("sandboxChanges", { since: q.since || undefined, diff: q.diff ? "true" : undefined }), ...opts,
    });
  }

  // Processes.

  private execBody(argv: string[], o: ExecOptions): M.ExecRequest {
    const { stdin, ...rest } = o as ExecOptions & CallOptions;
    delete (rest as CallOptions).signal;
    delete (rest as CallOptions).timeoutMs;
    const body: M.ExecRequest = { ...rest, argv };
    if (stdin !== undefined) body.stdin = b64(stdin);
    return body;
  }

  /** A call's timeout that leaves room for a command's own. */
  private longer(opts: CallOptions, seconds: number | undefined): number | undefined {
    if (opts.timeoutMs !== undefined || !seconds || seconds <= 0) return opts.timeoutMs;
    return Math.max(this.t.timeoutMs, seconds * 1000 + 30_000);
  }

  /** Runs a command and waits for it; its output is capped (see max_output_bytes). A command running longer than the call's timeout needs timeout_seconds or timeoutMs. */
  async exec(id: string, argv: string[], opts: ExecOptions & CallOptions = {}): Promise<ExecOutput> {
    const r = await this.t.json<M.ExecResult>({
      method: "POST",
      path: sbPath(id, "/exec"),
      json: this.execBody(argv, opts),
      signal: opts.signal,
      timeoutMs: this.longer(opts, opts.timeout_seconds),
    });
    return { ...r, stdout: unb64(r.stdout), stderr: unb64(r.stderr) };
  }

  /** Starts a command in the background; its stdin stays open. */
  async startProcess(id: string, argv: string[], opts: ExecOptions & CallOptions = {}): Promise<M.Process> {
    return this.t.json({ method: "POST", path: sbPath(id, "/processes"), json: this.execBody(argv, opts), signal: opts.signal, timeoutMs: opts.timeoutMs });
  }

  /** The sandbox's processes; with state "running" or "exited", those only (the running ones come from the daemon's memory, however many ended). */
  async listProcesses(id: string, opts: CallOptions & { state?: M.Process["state"] } = {}): Promise<M.ProcessList> {
    const { state, ...call } = opts;
    return this.t.json({ method: "GET", path: sbPath(id, "/processes"), query: query("listProcesses", { state }), ...call });
  }

  async getProcess(id: string, pid: string, opts: CallOptions = {}): Promise<M.Process> {
    return this.t.json({ method: "GET", path: pPath(id, pid), ...opts });
  }

  /** One wait of at most timeoutSeconds (1..300, default 30): the process, exited or still running. Process.wait() waits longer. */
  async waitProcess(id: string, pid: string, timeoutSeconds = 30, opts: CallOptions = {}): Promise<M.Process> {
    const secs = Math.max(1, Math.min(300, Math.ceil(timeoutSeconds)));
    return this.t.json({
      method: "GET",
      path: pPath(id, pid, "/wait"),
      query: query("waitProcess", { timeout_seconds: String(secs) }),
      signal: opts.signal,
      timeoutMs: this.longer(opts, secs),
    });
  }

  /** One stream of a process's output, not resumed when cut. */
  async *processOutputOnce(id: string, pid: string, o: OutputOptions = {}): AsyncGenerator<OutputChunk> {
    const headers: Record<string, string> = { accept: o.sse ? "text/event-stream" : "application/x-ndjson" };
    if (o.sse && o.cursor) headers["last-event-id"] = o.cursor;
    const q = query("processOutput", { cursor: o.sse ? undefined : o.cursor, follow: o.follow === false ? "false" : undefined });
    const ans = await this.t.send({ method: "GET", path: pPath(id, pid, "/output"), query: q, headers, stream: true, signal: o.signal, timeoutMs: o.timeoutMs });
    const sse = /^text\/event-stream/.test(headerOne(ans.headers["content-type"]) ?? "") || (o.sse === true && !ans.headers["content-type"]);
    try {
      for await (const ev of rawEvents(guardBody(ans.res, o.signal), sse)) {
        const e = decodeEvent<M.OutputEvent>("output", ev.data);
        yield { ...e, data: e.data ? Buffer.from(e.data, "base64") : undefined };
      }
    } finally {
      ans.done();
      if (!ans.res.complete) ans.res.destroy();
    }
  }

  /**
   * A process's output from o.cursor on: stdout, stderr and lost events,
   * then its exit event. A stream that is cut is reopened from the last
   * cursor (bounded: 30 attempts, one minute without an event).
   */
  processOutput(id: string, pid: string, o: OutputOptions = {}): AsyncGenerator<OutputChunk> {
    return reconnecting((cursor) => this.processOutputOnce(id, pid, { ...o, cursor }), o.cursor, (ev) => ev.kind === "exit", o.signal);
  }

  /** Appends data to the process's stdin (a stream is sent as it comes, never twice); with close, stdin is closed after it. */
  async writeStdin(id: string, pid: string, data: Body, opts: { close?: boolean } & CallOptions = {}): Promise<void> {
    await this.t.fetchBytes({
      method: "POST",
      path: pPath(id, pid, "/stdin"),
      query: query("writeStdin", { close: opts.close ? "true" : undefined }),
      headers: { "content-type": "application/octet-stream" },
      body: data ?? Buffer.alloc(0),
      signal: opts.signal,
      timeoutMs: opts.timeoutMs,
    });
  }

  /** Sends a signal: a name ("TERM", "SIGKILL") or a number ("9"). */
  async signalProcess(id: string, pid: string, signal: string, opts: CallOptions = {}): Promise<void> {
    await this.t.json({ method: "POST", path: pPath(id, pid, "/signal"), json: { signal } satisfies M.SignalRequest, ...opts });
  }

  /** Runs a command on a terminal, over a WebSocket. */
  async pty(id: string, argv: string[], opts: PtyOptions = {}): Promise<Pty> {
    const { signal, timeoutMs, ...start } = opts;
    const ws = await openWebSocket(this.t, sbPath(id, "/pty"), { signal, timeoutMs });
    const p = new Pty(ws);
    await ws.send(JSON.stringify({ ...start, argv } satisfies M.PTYStart));
    return p;
  }

  /**
   * Opens a TCP stream to 127.0.0.1:port inside the sandbox (a port
   * preview): the daemon dials into the sandbox's network namespace, so
   * its egress policy is unchanged. The stream is the caller's to end.
   */
  async portTunnel(id: string, port: number, opts: CallOptions = {}): Promise<Duplex> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new InvalidArgumentError("invalid_argument", `port ${port}: want 1 to 65535`);
    }
    const { socket, head } = await openUpgrade(this.t, sbPath(id, `/ports/${port}`), { upgrade: "tcp" }, opts);
    if (head.length > 0) socket.unshift(head);
    return socket;
  }

  // Network.

  private networkQuery(q: NetworkQuery, follow: boolean): URLSearchParams {
    return query("networkEvents", {
      allowed: q.allowed === undefined ? undefined : String(q.allowed),
      problems: q.problems ? "true" : undefined,
      host: q.host || undefined,
      since: q.since === undefined ? undefined : q.since instanceof Date ? q.since.toISOString() : q.since,
      cursor: q.cursor || undefined,
      limit: follow || !q.limit ? undefined : String(q.limit),
      follow: follow ? "true" : undefined,
    });
  }

  /** One page of the sandbox's egress audit, oldest first. */
  async networkEvents(id: string, q: NetworkQuery = {}, opts: CallOptions = {}): Promise<M.NetworkEventsPage> {
    return this.t.json({ method: "GET", path: sbPath(id, "/network"), query: this.networkQuery(q, false), ...opts });
  }

  /** The audit records q selects, then each new one, until the sandbox ends; reopened from the last cursor when cut. */
  followNetwork(id: string, q: NetworkQuery = {}, opts: CallOptions = {}): AsyncGenerator<M.NetworkEvent> {
    return this.followStored<M.NetworkEvent>(id, "/network", "network", (cursor) => this.networkQuery({ ...q, cursor }, true), q.cursor, opts);
  }

  /** A stream of stored events with cursors (.../network, .../events), reopened from the last cursor when cut. */
  private followStored<E extends { cursor?: string }>(id: string, rest: string, what: string, mkQuery: (cursor: string | undefined) => URLSearchParams,
    cursor: string | undefined, opts: CallOptions): AsyncGenerator<E> {
    const once = async function* (this: Airlock, cursor: string | undefined): AsyncGenerator<E> {
      const ans = await this.t.send({
        method: "GET",
        path: sbPath(id, rest),
        query: mkQuery(cursor),
        headers: { accept: "application/x-ndjson" },
        stream: true,
        ...opts,
      });
      try {
        for await (const ev of rawEvents(guardBody(ans.res, opts.signal), false)) yield decodeEvent<E>(what, ev.data);
      } finally {
        ans.done();
        if (!ans.res.complete) ans.res.destroy();
      }
    };
    return reconnecting((c) => once.call(this, c), cursor, () => false, opts.signal);
  }

  // Activity record (sandboxes made with record: true).

  private eventsQuery(q: EventsQuery, follow: boolean): URLSearchParams {
    return query("recordEvents", {
      type: q.type === undefined ? undefined : Array.isArray(q.type) ? q.type.join(",") : q.type,
      since: q.since === undefined ? undefined : q.since instanceof Date ? q.since.toISOString() : q.since,
      cursor: q.cursor || undefined,
      limit: follow || !q.limit ? undefined : String(q.limit),
      follow: follow ? "true" : undefined,
    });
  }

  /** One page of the sandbox's activity record, oldest first (a sandbox made without record: ConflictError). */
  async recordEvents(id: string, q: EventsQuery = {}, opts: CallOptions = {}): Promise<M.RecordEventsPage> {
    return this.t.json({ method: "GET", path: sbPath(id, "/events"), query: this.eventsQuery(q, false), ...opts });
  }

  /** The record's events q selects, then each new one, until the sandbox ends; reopened from the last cursor when cut. */
  followEvents(id: string, q: EventsQuery = {}, opts: CallOptions = {}): AsyncGenerator<M.RecordEvent> {
    return this.followStored<M.RecordEvent>(id, "/events", "record", (cursor) => this.eventsQuery({ ...q, cursor }, true), q.cursor, opts);
  }

  async getNetworkPolicy(id: string, opts: CallOptions = {}): Promise<M.NetworkPolicy> {
    return this.t.json({ method: "GET", path: sbPath(id, "/network/policy"), ...opts });
  }

  /** Replaces the sandbox's egress policy while it runs; connections it now denies are closed. */
  async setNetworkPolicy(id: string, policy: M.NetworkPolicy, opts: CallOptions = {}): Promise<M.NetworkPolicy> {
    return this.t.json({ method: "PUT", path: sbPath(id, "/network/policy"), json: policy, ...opts });
  }

  // Files.

  /** Reads a regular file (a link is followed in the sandbox) of at most maxSize bytes (default 1 GiB). */
  async readFile(id: string, path: string, opts: { maxSize?: number } & CallOptions = {}): Promise<Buffer> {
    const max = opts.maxSize && opts.maxSize > 0 ? opts.maxSize : DEFAULT_MAX_DOWNLOAD;
    const ans = await this.t.send({
      method: "GET",
      path: sbPath(id, "/files"),
      query: query("readFile", { path: filePath(path), max_size: opts.maxSize ? String(opts.maxSize) : undefined }),
      signal: opts.signal,
      timeoutMs: opts.timeoutMs,
    });
    try {
      const size = Number(headerOne(ans.headers["x-airlock-file-size"]) ?? ans.headers["content-length"] ?? 0);
      if (size > max) {
        ans.res.destroy();
        throw new TooLargeError("too_large", `${path}: ${size} bytes, over the limit of ${max}`);
      }
      return await readBody(ans.res, max);
    } finally {
      ans.done();
    }
  }

  /** Writes a file atomically: bytes, or a stream sent as it comes (never held whole, never sent twice). mode: its permission bits. */
  async writeFile(id: string, path: string, data: Body, opts: { mode?: number } & CallOptions = {}): Promise<void> {
    await this.t.fetchBytes({
      method: "PUT",
      path: sbPath(id, "/files"),
      query: query("writeFile", { path: filePath(path), mode: opts.mode ? (opts.mode & 0o7777).toString(8).padStart(4, "0") : undefined }),
      headers: { "content-type": "application/octet-stream" },
      body: data ?? Buffer.alloc(0),
      signal: opts.signal,
      timeoutMs: opts.timeoutMs,
    });
  }

  /** Removes a file; with recursive, a directory and everything in it. */
  async remove(id: string, path: string, opts: { recursive?: boolean } & CallOptions = {}): Promise<void> {
    const q = query("remove", { path: filePath(path), recursive: opts.recursive ? "true" : undefined });
    await this.t.json({ method: "DELETE", path: sbPath(id, "/files"), query: q, signal: opts.signal, timeoutMs: opts.timeoutMs });
  }

  /** Describes a file (a link is not followed). */
  async stat(id: string, path: string, opts: CallOptions = {}): Promise<M.FileInfo> {
    return this.t.json({ method: "GET", path: sbPath(id, "/files/stat"), query: query("stat", { path: filePath(path) }), ...opts });
  }

  /** The entries of a directory. */
  async list(id: string, path: string, opts: CallOptions = {}): Promise<M.FileList> {
    return this.t.json({ method: "GET", path: sbPath(id, "/files/list"), query: query("list", { path: filePath(path) }), ...opts });
  }

  /** Makes a directory and its missing parents (mkdir -p). */
  async mkdir(id: string, path: string, opts: { mode?: number } & CallOptions = {}): Promise<void> {
    const body: M.MkdirRequest = { path: filePath(path) };
    if (opts.mode) body.mode = opts.mode & 0o7777;
    await this.t.json({ method: "POST", path: sbPath(id, "/files/mkdir"), json: body, signal: opts.signal, timeoutMs: opts.timeoutMs });
  }

  async rename(id: string, from: string, to: string, opts: CallOptions = {}): Promise<void> {
    await this.t.json({ method: "POST", path: sbPath(id, "/files/rename"), json: { from, to } satisfies M.RenameRequest, ...opts });
  }

  /**
   * The tar stream of a file or tree (raw; downloadTo extracts it safely).
   * A fault the daemon reports after the stream started (its error trailer)
   * is thrown at the end; a cut stream is a StreamCutError.
   */
  async *download(id: string, path: string, opts: DownloadOptions & CallOptions = {}): AsyncGenerator<Buffer> {
    const ans = await this.t.send({
      method: "GET",
      path: sbPath(id, "/archive"),
      query: query("download", {
        path: filePath(path),
        max_size: opts.maxSize ? String(opts.maxSize) : undefined,
        follow_links: opts.followLinks ? "true" : undefined,
      }),
      headers: { accept: "application/x-tar" },
      stream: true,
      signal: opts.signal,
      timeoutMs: opts.timeoutMs,
    });
    try {
      yield* guardBody(ans.res, opts.signal);
      const trailer = headerOne(ans.res.trailers["x-airlock-error"]);
      if (trailer) {
        let code = "internal";
        let message = trailer;
        try {
          const b = JSON.parse(trailer) as M.ErrorBody;
          if (b.code) ({ code, message } = b);
        } catch {
          // a plain message
        }
        throw apiError(code, message);
      }
    } finally {
      ans.done();
      if (!ans.res.complete) ans.res.destroy();
    }
  }

  /** Copies a file or tree of the sandbox to the local path dest, safely (see extract.ts); returns the links left out. */
  async downloadTo(id: string, path: string, dest: string, opts: DownloadOptions & CallOptions = {}): Promise<Extracted> {
    return extractDownload(dest, async () => {
      const g = this.download(id, path, opts);
      // Open the stream (and meet the daemon's refusal) before anything is made locally.
      const first = await g.next();
      return (async function* () {
        if (!first.done) yield first.value;
        yield* g;
      })();
    }, opts);
  }

  /** Extracts a tar stream (bytes or a stream, sent as it comes) into the directory dir of the sandbox. */
  async upload(id: string, dir: string, tar: Body, opts: CallOptions = {}): Promise<void> {
    await this.t.fetchBytes({
      method: "PUT",
      path: sbPath(id, "/archive"),
      query: query("upload", { path: filePath(dir) }),
      headers: { "content-type": "application/x-tar" },
      body: tar,
      ...opts,
    });
  }

  /** Copies a local file or tree into the directory dir of the sandbox (under its base name). */
  async uploadFrom(id: string, localPath: string, dir: string, opts: CallOptions = {}): Promise<void> {
    return this.upload(id, dir, tarDir(localPath), opts);
  }

  // API keys (over the unix socket only).

  /** Makes an API key; its secret (key) is in this answer only. */
  async createKey(name?: string, opts: CallOptions = {}): Promise<M.APIKey> {
    return this.t.json({ method: "POST", path: "/v1/keys", json: (name ? { name } : {}) satisfies M.CreateKeyRequest, ...opts });
  }

  async listKeys(opts: CallOptions = {}): Promise<M.KeyList> {
    return this.t.json({ method: "GET", path: "/v1/keys", ...opts });
  }

  async revokeKey(kid: string, opts: CallOptions = {}): Promise<void> {
    await this.t.json({ method: "DELETE", path: `/v1/keys/${seg("key id", kid)}`, ...opts });
  }
}

export { untarTo };
