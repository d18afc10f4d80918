// The HTTP transport: node's http/https over the daemon's unix socket or
// TCP, with the API key, call timeouts, AbortSignal, and bounded retries of
// 429 answers after their Retry-After.

import * as http from "node:http";
import * as https from "node:https";
import { Readable } from "node:stream";
import { AirlockError, APIError, ConnectionError, ResourceExhaustedError, TimeoutError, errorFromAnswer } from "./errors.js";

/** The daemon's socket when it runs as root. */
export const DEFAULT_SOCKET = "/run/airlock/airlock.sock";

/** The longest wait for a 429's Retry-After; a daemon asking for longer gets the error back at once. */
export const MAX_RETRY_WAIT_MS = 30_000;

/** How to reach a daemon and how to call it. */
export interface ClientOptions {
  /** unix:///path/to.sock, http://host:port[/prefix] or https://host:port[/prefix]; default $AIRLOCK_HOST, else the local daemon's socket. */
  host?: string;
  /** The API key, sent as a bearer token (needed over TCP); default $AIRLOCK_API_KEY. */
  apiKey?: string;
  /** The time limit of a call in ms, from its start to the end of its answer (for a stream, to its headers); default 60000, 0 for none. */
  timeoutMs?: number;
  /** How many times a call answered 429 is sent again (only when its body can be sent again); default 3. */
  maxRetries?: number;
  /** Called before each retry of a 429, with the attempt number (1-based) and the wait in ms. */
  onRetry?: (info: { attempt: number; delayMs: number; error: APIError }) => void;
  /** TLS options for https:// hosts (a CA to trust, a client certificate). */
  tls?: https.AgentOptions;
}

/** Options every call takes. */
export interface CallOptions {
  /** Cancels the call (and the stream it returned). */
  signal?: AbortSignal;
  /** This call's time limit in ms, instead of the client's. */
  timeoutMs?: number;
}

/** A parsed daemon address. */
export interface HostSpec {
  socket?: string;
  protocol: "http:" | "https:";
  hostname: string;
  port?: number;
  prefix: string;
}

function badHost(host: string, why: string): never {
  throw new AirlockError("invalid_argument", `airlock: daemon address ${JSON.stringify(host)}: ${why} (want unix:///path/to.sock, http://host:port or https://host:port)`);
}

/** Parses a daemon address as the Go SDK and CLI do. */
export function parseHost(host: string): HostSpec {
  let u: URL;
  try {
    u = new URL(host);
  } catch {
    if (!/^[a-zA-Z][a-zA-Z0-9+.-]*:/.test(host)) badHost(host, "no scheme");
    badHost(host, "not a URL");
  }
  const scheme = u.protocol.slice(0, -1);
  if (scheme !== "unix" && scheme !== "http" && scheme !== "https") badHost(host, `unknown scheme ${JSON.stringify(scheme)}`);
  if (u.username || u.password || u.search || u.hash) badHost(host, "no user, query or fragment allowed");
  if (scheme === "unix") {
    if (u.host !== "") badHost(host, "the socket path must be absolute (three slashes: unix:///path)");
    const p = decodeURIComponent(u.pathname);
    if (!p || !p.startsWith("/") || p.endsWith("/")) badHost(host, "no socket path");
    return { socket: p, protocol: "http:", hostname: "airlock", prefix: "" };
  }
  if (!u.hostname) badHost(host, "no host name");
  let port: number | undefined;
  if (u.port) {
    port = Number(u.port);
    if (!Number.isInteger(port) || port <= 0 || port > 65535) badHost(host, "bad port");
  }
  const hostname = u.hostname.startsWith("[") ? u.hostname.slice(1, -1) : u.hostname;
  return { protocol: u.protocol as "http:" | "https:", hostname, port, prefix: u.pathname.replace(/\/+$/, "") };
}

/** The address a client uses when given none: $AIRLOCK_HOST, else the root daemon's socket as root, else the user's daemon's socket in $XDG_RUNTIME_DIR. */
export function defaultHost(): string {
  const h = process.env.AIRLOCK_HOST;
  if (h) return h;
  if (typeof process.geteuid === "function" && process.geteuid() === 0) return "unix://" + DEFAULT_SOCKET;
  const dir = process.env.XDG_RUNTIME_DIR;
  if (!dir) {
    throw new Error("airlock: no daemon address: set AIRLOCK_HOST (unix:///path/to.sock or http://host:port); XDG_RUNTIME_DIR, where a user's daemon puts its socket, is not set either");
  }
  return "unix://" + dir.replace(/\/+$/, "") + "/airlock.sock";
}

/** A request body: bytes (sent again on a retry) or a stream (never sent twice). */
export type Body = string | Uint8Array | AsyncIterable<Uint8Array> | Readable | null | undefined;

export interface Request extends CallOptions {
  method: string;
  path: string; // escaped, from the root
  query?: URLSearchParams;
  headers?: Record<string, string>;
  body?: Body;
  /** Return once the headers arrive (the body is read by the caller); the timeout then covers the headers only. */
  stream?: boolean;
}

/** An answer whose status is 2xx. */
export interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  res: http.IncomingMessage;
  /** Stops the call's timer and abort handling (for streams, when the caller has taken over). */
  done(): void;
}

/** The most of an error answer that is read. */
const MAX_ERROR_BODY = 64 << 10;

/** Parses a Retry-After header (seconds or an HTTP date) into ms. */
export function parseRetryAfter(v: string | undefined, now = Date.now()): number {
  if (!v) return 0;
  v = v.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const t = Date.parse(v);
  return Number.isFinite(t) && t > now ? t - now : 0;
}

function isReplayable(b: Body): b is string | Uint8Array | null | undefined {
  return b === null || b === undefined || typeof b === "string" || b instanceof Uint8Array;
}

/** The transport of one client. */
export class Transport {
  readonly host: string;
  readonly spec: HostSpec;
  readonly apiKey: string;
  readonly timeoutMs: number;
  readonly maxRetries: number;
  private readonly onRetry?: ClientOptions["onRetry"];
  private readonly agent: http.Agent;
  private readonly mod: typeof http | typeof https;

  constructor(opts: ClientOptions = {}) {
    this.host = opts.host || defaultHost();
    this.spec = parseHost(this.host);
    this.apiKey = opts.apiKey ?? process.env.AIRLOCK_API_KEY ?? "";
    this.timeoutMs = opts.timeoutMs ?? 60_000;
    this.maxRetries = Math.max(0, opts.maxRetries ?? 3);
    this.onRetry = opts.onRetry;
    if (this.spec.protocol === "https:") {
      this.mod = https;
      this.agent = new https.Agent({ keepAlive: true, maxSockets: 100, ...opts.tls });
    } else {
      this.mod = http;
      this.agent = new http.Agent({ keepAlive: true, maxSockets: 100 });
    }
  }

  /** Closes idle connections. */
  close(): void {
    this.agent.destroy();
  }

  /** The request options of a path (escaped, with its query). */
  requestOptions(method: string, path: string, headers: Record<string, string>): http.RequestOptions {
    const h: Record<string, string> = { "user-agent": "airlock-ts-sdk", ...headers };
    if (this.apiKey) h.authorization = "Bearer " + this.apiKey;
    const o: http.RequestOptions = { method, path: this.spec.prefix + path, headers: h, agent: this.agent };
    if (this.spec.socket) {
      o.socketPath = this.spec.socket;
      h.host = "airlock";
    } else {
      o.hostname = this.spec.hostname;
      if (this.spec.port) o.port = this.spec.port;
    }
    return o;
  }

  get module(): typeof http | typeof https {
    return this.mod;
  }

  /** The error of a connection that failed before any answer. */
  connectionError(err: NodeJS.ErrnoException): ConnectionError {
    const code = err.code || "";
    if (this.spec.socket && (code === "ENOENT" || code === "ECONNREFUSED")) {
      return new ConnectionError(
        `airlock: cannot reach the airlock daemon at ${this.host}: it is not running (start it with \`airlock serve\`), or set AIRLOCK_HOST to where it listens (${err.message})`,
        { cause: err },
      );
    }
    return new ConnectionError(`airlock: cannot reach the airlock daemon at ${this.host}: ${err.message}`, { cause: err });
  }

  /** Sends a request; returns a 2xx answer or throws the error the daemon answered. */
  async send(r: Request): Promise<Answer> {
    const timeoutMs = r.timeoutMs ?? this.timeoutMs;
    const deadline = timeoutMs > 0 ? Date.now() + timeoutMs : Infinity;
    const replayable = isReplayable(r.body);
    for (let attempt = 0; ; attempt++) {
      const ans = await this.once(r, deadline, timeoutMs);
      if (ans.status >= 200 && ans.status <= 299) return ans;
      let err: APIError;
      try {
        const body = await readBody(ans.res, MAX_ERROR_BODY);
        err = errorFromAnswer(ans.status, parseRetryAfter(headerOne(ans.headers["retry-after"])), body);
      } finally {
        ans.done();
      }
      if (!(err instanceof ResourceExhaustedError) || ans.status !== 429 || !replayable || attempt >= this.maxRetries) throw err;
      const delay = err.retryAfterMs > 0 ? err.retryAfterMs : Math.min(250 * 2 ** attempt, 4000);
      if (delay > MAX_RETRY_WAIT_MS || Date.now() + delay >= deadline) throw err;
      this.onRetry?.({ attempt: attempt + 1, delayMs: delay, error: err });
      await sleep(delay, r.signal);
    }
  }

  /** One attempt of a request. */
  private once(r: Request, deadline: number, timeoutMs: number): Promise<Answer> {
    const what = `${r.method} ${r.path}`;
    return new Promise<Answer>((resolve, reject) => {
      if (r.signal?.aborted) {
        reject(r.signal.reason);
        return;
      }
      const headers: Record<string, string> = { ...r.headers };
      const body = r.body;
      let bytes: Buffer | undefined;
      if (typeof body === "string") bytes = Buffer.from(body, "utf8");
      else if (body instanceof Uint8Array) bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
      if (bytes) headers["content-length"] = String(bytes.length);
      const qs = r.query && [...r.query.keys()].length ? "?" + r.query.toString() : "";
      const opts = this.requestOptions(r.method, r.path + qs, headers);
      let settled = false;
      let answered = false;
      let res: http.IncomingMessage | undefined;
      let timer: (() => void) | undefined; // cancels the deadline's timer
      const cleanup = () => {
        timer?.();
        timer = undefined;
        r.signal?.removeEventListener("abort", onAbort);
      };
      const fail = (e: unknown) => {
        if (!settled) {
          settled = true;
          cleanup();
          reject(e);
        }
        req.destroy(e instanceof Error ? e : undefined);
        res?.destroy(e instanceof Error ? e : undefined);
      };
      const onAbort = () => fail(r.signal!.reason);
      const req = this.mod.request(opts);
      if (deadline !== Infinity) {
        timer = armTimer(
          () => {
            const e = new TimeoutError(`airlock: ${what}: no ${answered ? "complete answer" : "answer"} within ${timeoutMs} ms (the call's timeout)`);
            if (!settled) fail(e);
            else {
              // The caller reads the body: cut it with the timeout's error.
              res?.destroy(e);
              cleanup();
            }
          },
          Math.max(0, deadline - Date.now()),
        );
      }
      r.signal?.addEventListener("abort", onAbort, { once: true });
      req.on("error", (e: NodeJS.ErrnoException) => {
        if (settled) return;
        if (e instanceof TimeoutError) return fail(e);
        fail(answered ? e : this.connectionError(e));
      });
      req.on("response", (m) => {
        answered = true;
        res = m;
        if (settled) return;
        settled = true;
        const done = () => cleanup();
        if (!r.stream) {
          // The timer and signal stay armed until the caller has read the body.
        } else {
          timer?.();
          timer = undefined;
        }
        resolve({ status: m.statusCode ?? 0, headers: m.headers, res: m, done });
      });
      if (bytes) {
        req.end(bytes);
      } else if (body) {
        const src = body instanceof Readable ? body : Readable.from(body as AsyncIterable<Uint8Array>, { objectMode: false });
        src.on("error", (e) => fail(e));
        req.on("error", () => src.destroy());
        src.pipe(req);
      } else {
        req.end();
      }
    });
  }

  /** Sends a request and returns its whole answer (bounded by limit bytes). */
  async fetchBytes(r: Request, limit = 256 << 20): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
    const ans = await this.send(r);
    try {
      const body = await readBody(ans.res, limit);
      return { status: ans.status, headers: ans.headers, body };
    } catch (e) {
      throw bodyError(e, r);
    } finally {
      ans.done();
    }
  }

  /** Sends a JSON request (body: a value to encode, or undefined) and decodes its JSON answer. */
  async json<T>(r: Omit<Request, "body"> & { json?: unknown }): Promise<T> {
    const headers: Record<string, string> = { accept: "application/json", ...r.headers };
    let body: string | undefined;
    if (r.json !== undefined) {
      body = JSON.stringify(r.json);
      headers["content-type"] = "application/json";
    }
    const { body: out, status } = await this.fetchBytes({ ...r, headers, body });
    if (status === 204 || out.length === 0) return undefined as T;
    try {
      return JSON.parse(out.toString("utf8")) as T;
    } catch (e) {
      throw new APIError("bad_answer", `${r.method} ${r.path}: the answer is not JSON: ${(e as Error).message}`, status);
    }
  }
}

function bodyError(e: unknown, r: Request): unknown {
  if (e instanceof TimeoutError || e instanceof APIError || (r.signal?.aborted && e === r.signal.reason)) return e;
  if ((e as Error)?.name === "AbortError" && r.signal?.aborted) return r.signal.reason;
  return new ConnectionError(`airlock: ${r.method} ${r.path}: the answer was cut: ${(e as Error)?.message ?? e}`, { cause: e });
}

export function headerOne(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/** Reads a whole body, refusing more than limit bytes. */
export function readBody(res: http.IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let n = 0;
    res.on("data", (c: Buffer) => {
      n += c.length;
      if (n > limit) {
        reject(new APIError("too_large", `the answer holds more than ${limit} bytes`));
        res.destroy();
        return;
      }
      parts.push(c);
    });
    res.on("end", () => (res.complete ? resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts)) : reject(new ConnectionError("airlock: the answer was cut"))));
    res.on("error", reject);
    res.on("close", () => {
      if (!res.complete) reject(new ConnectionError("airlock: the answer was cut"));
    });
  });
}

/** The longest delay Node's timers take: a longer one fires after 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Calls fn after ms (any length: a delay past Node's 2^31-1 ms, which
 * would fire at once, is waited out in steps) and returns what cancels it.
 */
export function armTimer(fn: () => void, ms: number): () => void {
  const at = Date.now() + Math.max(0, ms);
  let t: NodeJS.Timeout;
  const arm = () => {
    const left = at - Date.now();
    t = left > MAX_TIMER_MS ? setTimeout(arm, MAX_TIMER_MS) : setTimeout(fn, Math.max(0, left));
  };
  arm();
  return () => clearTimeout(t);
}

/** Waits ms, or throws the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const cancel = armTimer(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      cancel();
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
