// Handles over the client: a Sandbox (cleaned up by `await using` or
// close()), its Processes, its files and its network.

import "./polyfill.js";
import { Airlock, type Bytes, type CreateSandboxInput, type ExecOptions, type ExecOutput, type NetworkQuery, type OutputChunk, type OutputOptions } from "./client.js";
import { NotFoundError } from "./errors.js";
import type { DownloadOptions, Extracted } from "./extract.js";
import type * as M from "./models.js";
import type { Body, CallOptions, ClientOptions } from "./transport.js";
import type { Pty, PtyOptions } from "./ws.js";

/** A command: an argv, or a shell line (run with sh -c). */
export type Command = string[] | string;

function argvOf(cmd: Command): string[] {
  return typeof cmd === "string" ? ["sh", "-c", cmd] : cmd;
}

/** Options of Sandbox.create: the sandbox's settings, and the client to use (default: one from the environment, closed with the sandbox). */
export interface CreateOptions extends CreateSandboxInput, CallOptions {
  client?: Airlock;
  clientOptions?: ClientOptions;
}

/** A sandbox of the daemon. `await using sb = await Sandbox.create()` deletes it at the end of the block. */
export class Sandbox {
  /** The sandbox as last seen (refresh() updates it). */
  info: M.Sandbox;
  readonly files: Files;
  readonly network: Network;
  private closed = false;

  constructor(
    readonly client: Airlock,
    info: M.Sandbox,
    private readonly ownsClient = false,
  ) {
    this.info = info;
    this.files = new Files(client, info.id);
    this.network = new Network(client, info.id);
  }

  /** Creates a sandbox. */
  static async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const { client, clientOptions, signal, timeoutMs, ...req } = opts;
    const c = client ?? new Airlock(clientOptions);
    try {
      return new Sandbox(c, await c.createSandbox(req, { signal, timeoutMs }), !client);
    } catch (e) {
      if (!client) c.close();
      throw e;
    }
  }

  /** A handle of an existing sandbox. */
  static async connect(id: string, opts: { client?: Airlock; clientOptions?: ClientOptions } & CallOptions = {}): Promise<Sandbox> {
    const c = opts.client ?? new Airlock(opts.clientOptions);
    try {
      return new Sandbox(c, await c.getSandbox(id, opts), !opts.client);
    } catch (e) {
      if (!opts.client) c.close();
      throw e;
    }
  }

  get id(): string {
    return this.info.id;
  }

  get state(): M.Sandbox["state"] {
    return this.info.state;
  }

  async refresh(opts: CallOptions = {}): Promise<M.Sandbox> {
    return (this.info = await this.client.getSandbox(this.id, opts));
  }

  /** Runs a command and waits for it (output as Buffers; exit_code, signal, timed_out). */
  exec(cmd: Command, opts: ExecOptions & CallOptions = {}): Promise<ExecOutput> {
    return this.client.exec(this.id, argvOf(cmd), opts);
  }

  /** Starts a command in the background. */
  async start(cmd: Command, opts: ExecOptions & CallOptions = {}): Promise<Process> {
    return new Process(this.client, await this.client.startProcess(this.id, argvOf(cmd), opts));
  }

  /** A handle of a process started earlier (to reattach to its output). */
  async process(pid: string, opts: CallOptions = {}): Promise<Process> {
    return new Process(this.client, await this.client.getProcess(this.id, pid, opts));
  }

  /** The processes started in the sandbox. */
  /** The sandbox's processes; with state "running" or "exited", those only. */
  async processes(opts: CallOptions & { state?: M.Process["state"] } = {}): Promise<Process[]> {
    return (await this.client.listProcesses(this.id, opts)).processes.map((p) => new Process(this.client, p));
  }

  /** Runs a command on a terminal. */
  pty(cmd: Command, opts: PtyOptions = {}): Promise<Pty> {
    return this.client.pty(this.id, argvOf(cmd), opts);
  }

  async pause(opts: CallOptions = {}): Promise<void> {
    this.info = await this.client.pauseSandbox(this.id, opts);
  }

  async resume(opts: CallOptions = {}): Promise<void> {
    this.info = await this.client.resumeSandbox(this.id, opts);
  }

  /** Snapshots /workspace, with the sandbox frozen during the copy (processes are not captured). */
  async snapshot(req: M.CreateSnapshotRequest = {}, opts: CallOptions = {}): Promise<M.Snapshot> {
    return this.client.createSnapshot(this.id, req, opts);
  }

  /** count new sandboxes from a snapshot of this one's state, each with its own copy of /workspace. */
  async fork(count = 1, opts: CallOptions = {}): Promise<Sandbox[]> {
    const res = await this.client.forkSandbox(this.id, { count }, opts);
    return res.sandboxes.map((s) => new Sandbox(this.client, s));
  }

  /** Puts /workspace back to a snapshot, in place; every process of the sandbox is killed. */
  async restore(snapshot: string, opts: CallOptions = {}): Promise<void> {
    this.info = await this.client.restoreSandbox(this.id, snapshot, opts);
  }

  /** /workspace's changes since a snapshot (or since the sandbox's creation). */
  async changes(q: { since?: string; diff?: boolean } = {}, opts: CallOptions = {}): Promise<M.Changes> {
    return this.client.sandboxChanges(this.id, q, opts);
  }

  /** The sandbox now expires seconds from now. */
  async setTimeout(seconds: number, opts: CallOptions = {}): Promise<void> {
    this.info = await this.client.setTimeout(this.id, seconds, opts);
  }

  /** Deletes the sandbox (a sandbox already gone is not an error), and closes the client it made. Calling it again does nothing. */
  async close(opts: CallOptions = {}): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.client.deleteSandbox(this.id, opts);
    } catch (e) {
      if (!(e instanceof NotFoundError)) {
        this.closed = false;
        throw e;
      }
    } finally {
      if (this.ownsClient && this.closed) this.client.close();
    }
  }

  /** The same as close(). */
  delete(opts: CallOptions = {}): Promise<void> {
    return this.close(opts);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** The result of Process.collect(). */
export interface Collected {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number | null;
  signal: number;
  /** Bytes the daemon dropped before they were read (lost events). */
  lost: number;
}

/**
 * A process started in a sandbox. Iterating it gives its output events
 * (stdout, stderr, lost) until it exits, resumed from the last cursor
 * when a stream is cut.
 */
export class Process implements AsyncIterable<OutputChunk> {
  info: M.Process;
  /** The cursor after the last event read through this handle. */
  cursor: string | undefined;
  /** The exit event, once read. */
  exit: OutputChunk | undefined;

  constructor(
    readonly client: Airlock,
    info: M.Process,
  ) {
    this.info = info;
  }

  get id(): string {
    return this.info.id;
  }

  get sandboxId(): string {
    return this.info.sandbox_id;
  }

  /** The output from a cursor (default: where this handle's reading stopped, or the start). */
  async *output(opts: OutputOptions = {}): AsyncGenerator<OutputChunk> {
    for await (const ev of this.client.processOutput(this.sandboxId, this.id, { ...opts, cursor: opts.cursor ?? this.cursor })) {
      this.cursor = ev.cursor;
      if (ev.kind === "exit") this.exit = ev;
      yield ev;
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<OutputChunk> {
    return this.output();
  }

  /** Reads the output to the exit and returns it whole. */
  async collect(opts: CallOptions = {}): Promise<Collected> {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let lost = 0;
    let exit: OutputChunk | undefined;
    for await (const ev of this.output(opts)) {
      if (ev.kind === "stdout" && ev.data) out.push(ev.data);
      else if (ev.kind === "stderr" && ev.data) err.push(ev.data);
      else if (ev.kind === "lost") lost += ev.bytes ?? 0;
      else if (ev.kind === "exit") exit = ev;
    }
    return { stdout: Buffer.concat(out), stderr: Buffer.concat(err), exitCode: exit?.exit_code ?? null, signal: exit?.signal ?? 0, lost };
  }

  async refresh(opts: CallOptions = {}): Promise<M.Process> {
    return (this.info = await this.client.getProcess(this.sandboxId, this.id, opts));
  }

  /** Waits until the process exits, or timeoutMs passes (then it is returned still running); default: no limit. */
  async wait(opts: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<M.Process> {
    const deadline = opts.timeoutMs && opts.timeoutMs > 0 ? Date.now() + opts.timeoutMs : Infinity;
    for (;;) {
      const left = deadline - Date.now();
      const secs = left === Infinity ? 300 : Math.max(1, Math.min(300, Math.ceil(left / 1000)));
      this.info = await this.client.waitProcess(this.sandboxId, this.id, secs, { signal: opts.signal });
      if (this.info.state === "exited" || Date.now() >= deadline) return this.info;
    }
  }

  /** Appends to stdin; with close, closes it after. */
  write(data: Body, opts: { close?: boolean } & CallOptions = {}): Promise<void> {
    return this.client.writeStdin(this.sandboxId, this.id, data, opts);
  }

  closeStdin(opts: CallOptions = {}): Promise<void> {
    return this.client.writeStdin(this.sandboxId, this.id, null, { ...opts, close: true });
  }

  /** Sends a signal: "TERM", "SIGKILL", "9". */
  signal(sig: string, opts: CallOptions = {}): Promise<void> {
    return this.client.signalProcess(this.sandboxId, this.id, sig, opts);
  }

  kill(opts: CallOptions = {}): Promise<void> {
    return this.signal("KILL", opts);
  }
}

/** The files of a sandbox. Paths are absolute or relative to /workspace. */
export class Files {
  constructor(
    readonly client: Airlock,
    readonly sandboxId: string,
  ) {}

  read(path: string, opts: { maxSize?: number } & CallOptions = {}): Promise<Buffer> {
    return this.client.readFile(this.sandboxId, path, opts);
  }

  async readText(path: string, opts: { maxSize?: number } & CallOptions = {}): Promise<string> {
    return (await this.read(path, opts)).toString("utf8");
  }

  write(path: string, data: Body, opts: { mode?: number } & CallOptions = {}): Promise<void> {
    return this.client.writeFile(this.sandboxId, path, data, opts);
  }

  writeText(path: string, text: string, opts: { mode?: number } & CallOptions = {}): Promise<void> {
    return this.write(path, text, opts);
  }

  stat(path: string, opts: CallOptions = {}): Promise<M.FileInfo> {
    return this.client.stat(this.sandboxId, path, opts);
  }

  /** Whether path exists (a dangling link exists). */
  async exists(path: string, opts: CallOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, opts);
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  async list(path = ".", opts: CallOptions = {}): Promise<M.FileInfo[]> {
    return (await this.client.list(this.sandboxId, path, opts)).entries;
  }

  mkdir(path: string, opts: { mode?: number } & CallOptions = {}): Promise<void> {
    return this.client.mkdir(this.sandboxId, path, opts);
  }

  remove(path: string, opts: { recursive?: boolean } & CallOptions = {}): Promise<void> {
    return this.client.remove(this.sandboxId, path, opts);
  }

  rename(from: string, to: string, opts: CallOptions = {}): Promise<void> {
    return this.client.rename(this.sandboxId, from, to, opts);
  }

  /** Copies a local file or tree into the directory dir of the sandbox. */
  upload(localPath: string, dir = "/workspace", opts: CallOptions = {}): Promise<void> {
    return this.client.uploadFrom(this.sandboxId, localPath, dir, opts);
  }

  /** Extracts a tar stream into the directory dir of the sandbox. */
  uploadTar(dir: string, tar: Body | Bytes, opts: CallOptions = {}): Promise<void> {
    return this.client.upload(this.sandboxId, dir, tar, opts);
  }

  /** Copies a file or tree of the sandbox to the local path dest (links leaving the tree are left out and listed; nothing is written through a link; bounded by maxSize). */
  download(path: string, dest: string, opts: DownloadOptions & CallOptions = {}): Promise<Extracted> {
    return this.client.downloadTo(this.sandboxId, path, dest, opts);
  }

  /** The raw tar stream of a file or tree. */
  downloadTar(path: string, opts: DownloadOptions & CallOptions = {}): AsyncGenerator<Buffer> {
    return this.client.download(this.sandboxId, path, opts);
  }
}

/** The egress of a sandbox: its audit and its live policy. */
export class Network {
  constructor(
    readonly client: Airlock,
    readonly sandboxId: string,
  ) {}

  /** One page of the audit. */
  events(q: NetworkQuery = {}, opts: CallOptions = {}): Promise<M.NetworkEventsPage> {
    return this.client.networkEvents(this.sandboxId, q, opts);
  }

  /** The audit records, then each new one until the sandbox ends. */
  follow(q: NetworkQuery = {}, opts: CallOptions = {}): AsyncGenerator<M.NetworkEvent> {
    return this.client.followNetwork(this.sandboxId, q, opts);
  }

  policy(opts: CallOptions = {}): Promise<M.NetworkPolicy> {
    return this.client.getNetworkPolicy(this.sandboxId, opts);
  }

  setPolicy(p: M.NetworkPolicy, opts: CallOptions = {}): Promise<M.NetworkPolicy> {
    return this.client.setNetworkPolicy(this.sandboxId, p, opts);
  }
}
