// A small WebSocket client (RFC 6455) over the transport's connection, for
// the daemon's PTY endpoint, and the Pty session on top of it.

import { createHash, randomBytes } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { AirlockError, ConnectionError, StreamCutError, TimeoutError, apiError, errorFromAnswer } from "./errors.js";
import type { PTYExit, PTYStart } from "./models.js";
import { type CallOptions, type Transport, armTimer, readBody } from "./transport.js";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/** The largest message accepted from the daemon. */
const MAX_MESSAGE = 16 << 20;
/** Terminal output held for a slow reader before the socket is paused. */
const HIGH_WATER = 1 << 20;

type Message = { text: true; data: string } | { text: false; data: Buffer };

/** A WebSocket connection (client side). */
export class WebSocketConn {
  private buf: Buffer = Buffer.alloc(0);
  private frags: Buffer[] = [];
  private fragText = false;
  private closed = false;
  /** Called for each whole message. */
  onMessage: (m: Message) => void = () => {};
  /** Called once when the connection ends: with the close code, or with the error that broke it. */
  onEnd: (code: number, err?: Error) => void = () => {};
  private ended = false;

  constructor(
    readonly socket: Duplex,
    private readonly head: Buffer,
  ) {}

  /** Starts reading, once onMessage and onEnd are set (the socket holds what arrives until then). */
  start(): void {
    const socket = this.socket;
    socket.on("error", (e) => this.end(1006, e));
    socket.on("close", () => this.end(1006, this.closed ? undefined : new StreamCutError("airlock: pty: the connection was cut")));
    if (this.head.length) this.feed(this.head);
    socket.on("data", (d: Buffer) => this.feed(d));
  }

  private end(code: number, err?: Error) {
    if (this.ended) return;
    this.ended = true;
    this.onEnd(code, err);
  }

  private feed(d: Buffer) {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    try {
      while (this.parseOne());
    } catch (e) {
      this.end(1002, e as Error);
      this.socket.destroy();
    }
  }

  private parseOne(): boolean {
    const b = this.buf;
    if (b.length < 2) return false;
    const fin = (b[0]! & 0x80) !== 0;
    const op = b[0]! & 0x0f;
    if ((b[1]! & 0x80) !== 0) throw new Error("airlock: pty: a masked frame from the server");
    let len = b[1]! & 0x7f;
    let off = 2;
    if (len === 126) {
      if (b.length < 4) return false;
      len = b.readUInt16BE(2);
      off = 4;
    } else if (len === 127) {
      if (b.length < 10) return false;
      const big = b.readBigUInt64BE(2);
      if (big > BigInt(MAX_MESSAGE)) throw new Error("airlock: pty: a frame is too large");
      len = Number(big);
      off = 10;
    }
    if (len > MAX_MESSAGE) throw new Error("airlock: pty: a frame is too large");
    if (b.length < off + len) return false;
    const payload = b.subarray(off, off + len);
    this.buf = b.subarray(off + len);
    switch (op) {
      case 0x0: // continuation
      case 0x1:
      case 0x2: {
        if (op !== 0) {
          if (this.frags.length) throw new Error("airlock: pty: a new message inside a fragmented one");
          this.fragText = op === 1;
        } else if (!this.frags.length) throw new Error("airlock: pty: a continuation without a message");
        this.frags.push(Buffer.from(payload));
        if (this.frags.reduce((n, f) => n + f.length, 0) > MAX_MESSAGE) throw new Error("airlock: pty: a message is too large");
        if (fin) {
          const data = Buffer.concat(this.frags);
          this.frags = [];
          this.onMessage(this.fragText ? { text: true, data: data.toString("utf8") } : { text: false, data });
        }
        break;
      }
      case 0x8: {
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        if (!this.closed) {
          this.closed = true;
          this.writeFrame(0x8, payload.subarray(0, 2));
        }
        this.end(code);
        this.socket.end();
        break;
      }
      case 0x9:
        this.writeFrame(0xa, payload);
        break;
      case 0xa:
        break;
      default:
        throw new Error(`airlock: pty: unknown frame opcode ${op}`);
    }
    return true;
  }

  private writeFrame(op: number, payload: Buffer): boolean {
    if (this.socket.destroyed) return false;
    const mask = randomBytes(4);
    let head: Buffer;
    if (payload.length < 126) {
      head = Buffer.from([0x80 | op, 0x80 | payload.length]);
    } else if (payload.length < 65536) {
      head = Buffer.alloc(4);
      head[0] = 0x80 | op;
      head[1] = 0x80 | 126;
      head.writeUInt16BE(payload.length, 2);
    } else {
      head = Buffer.alloc(10);
      head[0] = 0x80 | op;
      head[1] = 0x80 | 127;
      head.writeBigUInt64BE(BigInt(payload.length), 2);
    }
    const masked = Buffer.alloc(payload.length);
    for (let i = 0; i < payload.length; i++) masked[i] = payload[i]! ^ mask[i & 3]!;
    return this.socket.write(Buffer.concat([head, mask, masked]));
  }

  /** Sends a text or binary message; resolves once the socket took it (back-pressure). */
  async send(data: string | Uint8Array): Promise<void> {
    if (this.closed || this.socket.destroyed) throw new ConnectionError("airlock: pty: the connection is closed");
    const text = typeof data === "string";
    const payload = text ? Buffer.from(data, "utf8") : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    if (!this.writeFrame(text ? 0x1 : 0x2, payload)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          this.socket.off("drain", done);
          this.socket.off("close", done);
          resolve();
        };
        this.socket.once("drain", done);
        this.socket.once("close", done);
      });
    }
  }

  /** Starts the closing handshake. */
  close(code = 1000): void {
    if (this.closed) return;
    this.closed = true;
    const p = Buffer.alloc(2);
    p.writeUInt16BE(code, 0);
    this.writeFrame(0x8, p);
    const t = setTimeout(() => this.socket.destroy(), 2000);
    t.unref();
  }
}

/**
 * Sends GET path with an HTTP Upgrade (headers name the protocol) and
 * resolves to the upgraded connection and the bytes that came with the
 * answer. An ordinary answer is the API's error.
 */
export function openUpgrade(
  t: Transport,
  path: string,
  headers: Record<string, string>,
  opts: CallOptions = {},
): Promise<{ res: IncomingMessage; socket: Duplex; head: Buffer }> {
  const timeoutMs = opts.timeoutMs ?? t.timeoutMs;
  return new Promise((resolve, reject) => {
    if (opts.signal?.aborted) return reject(opts.signal.reason);
    const o = t.requestOptions("GET", path, { connection: "Upgrade", ...headers });
    o.agent = false; // the socket is the session's own
    const req = t.module.request(o);
    let settled = false;
    const finish = (f: () => void) => {
      if (settled) return;
      settled = true;
      cancelTimer();
      opts.signal?.removeEventListener("abort", onAbort);
      f();
    };
    const onAbort = () => finish(() => {
      req.destroy();
      reject(opts.signal!.reason);
    });
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    const cancelTimer = timeoutMs > 0 && timeoutMs !== Infinity ? armTimer(
      () => finish(() => {
        req.destroy();
        reject(new TimeoutError(`airlock: GET ${path}: no answer within ${timeoutMs} ms (the call's timeout)`));
      }),
      timeoutMs,
    ) : () => {};
    req.on("error", (e: NodeJS.ErrnoException) => finish(() => reject(t.connectionError(e))));
    req.on("response", (res: IncomingMessage) => {
      readBody(res, 64 << 10).then(
        (body) => finish(() => reject(errorFromAnswer(res.statusCode ?? 0, 0, body))),
        (e) => finish(() => reject(e)),
      );
    });
    req.on("upgrade", (res: IncomingMessage, socket: Duplex, head: Buffer) => finish(() => resolve({ res, socket, head })));
    req.end();
  });
}

/** Opens a WebSocket to path through the transport. */
export async function openWebSocket(t: Transport, path: string, opts: CallOptions = {}): Promise<WebSocketConn> {
  const key = randomBytes(16).toString("base64");
  const { res, socket, head } = await openUpgrade(t, path, {
    upgrade: "websocket",
    "sec-websocket-key": key,
    "sec-websocket-version": "13",
  }, opts);
  const want = createHash("sha1").update(key + GUID).digest("base64");
  if (res.headers["sec-websocket-accept"] !== want) {
    socket.destroy();
    throw new AirlockError("bad_answer", "airlock: pty: the server's WebSocket handshake is wrong");
  }
  return new WebSocketConn(socket, head);
}

/** Options of a PTY session: the command's ExecRequest fields and the terminal's size. */
export type PtyOptions = Omit<PTYStart, "argv" | "stdin"> & CallOptions;

/**
 * A process on a terminal. Iterate it for the terminal's output (Buffers);
 * write() sends input, resize() and signal() control it, wait() gives its
 * exit. The reader's pace is the daemon's: a reader that does not read
 * pauses the connection once 1 MiB is waiting.
 */
export class Pty implements AsyncIterable<Buffer> {
  private queue: Buffer[] = [];
  private queued = 0;
  private waiters: Array<() => void> = [];
  private ended = false;
  private endErr: Error | undefined;
  private exitInfo: PTYExit | undefined;
  private exitWaiters: Array<{ resolve: (e: PTYExit) => void; reject: (e: unknown) => void }> = [];

  constructor(private readonly ws: WebSocketConn) {
    ws.onMessage = (m) => {
      if (m.text) {
        try {
          this.exitInfo = JSON.parse(m.data) as PTYExit;
        } catch {
          // not an exit: ignored
        }
        return;
      }
      this.queue.push(m.data);
      this.queued += m.data.length;
      if (this.queued > HIGH_WATER) ws.socket.pause();
      this.wake();
    };
    ws.onEnd = (_code, err) => {
      this.ended = true;
      if (!this.exitInfo) this.endErr = err ?? new StreamCutError("airlock: pty: the session ended without an exit status");
      this.wake();
      for (const w of this.exitWaiters.splice(0)) this.settle(w);
    };
    ws.start();
  }

  private settle(w: { resolve: (e: PTYExit) => void; reject: (e: unknown) => void }) {
    const x = this.exitInfo;
    if (x && x.error) w.reject(apiError(x.error_code || "internal", x.error));
    else if (x) w.resolve(x);
    else w.reject(this.endErr);
  }

  private wake() {
    for (const w of this.waiters.splice(0)) w();
  }

  /** Sends input to the terminal. */
  write(data: string | Uint8Array): Promise<void> {
    return this.ws.send(typeof data === "string" ? Buffer.from(data, "utf8") : data);
  }

  /** Sets the terminal's size. */
  resize(cols: number, rows: number): Promise<void> {
    return this.ws.send(JSON.stringify({ resize: { cols, rows } }));
  }

  /** Sends a signal ("TERM", "INT", "9") to the process. */
  signal(sig: string): Promise<void> {
    return this.ws.send(JSON.stringify({ signal: sig }));
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Buffer> {
    for (;;) {
      const b = this.queue.shift();
      if (b) {
        this.queued -= b.length;
        if (this.queued <= HIGH_WATER / 2 && this.ws.socket.isPaused()) this.ws.socket.resume();
        yield b;
        continue;
      }
      if (this.ended) {
        if (this.endErr && !this.exitInfo) throw this.endErr;
        return;
      }
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  /** Waits for the process's exit (the daemon's last message). A command that could not start is its API error (CommandNotFoundError...). */
  wait(): Promise<PTYExit> {
    return new Promise((resolve, reject) => {
      const w = { resolve, reject };
      if (this.ended) this.settle(w);
      else {
        this.exitWaiters.push(w);
        // Output nobody reads must not hold the exit back.
        if (this.ws.socket.isPaused()) this.ws.socket.resume();
      }
    });
  }

  /** Closes the session (the process gets a hangup if it still runs). */
  close(): void {
    this.ws.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}
