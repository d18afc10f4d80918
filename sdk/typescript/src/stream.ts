// The daemon's event streams (process output, network events): NDJSON or
// Server-Sent Events carrying one JSON event each. An error after the
// stream started is its last event: {"error": {"code", "message"}}.

import type { IncomingMessage } from "node:http";
import { AirlockError, APIError, ConnectionError, StreamCutError, TimeoutError, UnavailableError, apiError } from "./errors.js";
import { sleep } from "./transport.js";

/** The longest line a stream may carry. */
export const MAX_EVENT_LINE = 16 << 20;

/** Splits a body into lines ending with "\n" (NDJSON) or "\n", "\r\n" or "\r" (SSE). A last line without its end is a cut. */
async function* lines(res: AsyncIterable<Buffer>, sse: boolean): AsyncGenerator<string> {
  let buf = "";
  const dec = new TextDecoder("utf-8");
  for await (const chunk of res) {
    buf += dec.decode(chunk, { stream: true });
    let start = 0;
    for (;;) {
      let end: number;
      let next: number;
      if (!sse) {
        end = buf.indexOf("\n", start);
        if (end < 0) break;
        next = end + 1;
      } else {
        const n = buf.indexOf("\n", start);
        const r = buf.indexOf("\r", start);
        if (r >= 0 && (n < 0 || r < n)) {
          if (r + 1 === buf.length) break; // a "\n" may follow in the next chunk
          end = r;
          next = buf[r + 1] === "\n" ? r + 2 : r + 1;
        } else if (n >= 0) {
          end = n;
          next = n + 1;
        } else break;
      }
      yield buf.slice(start, end);
      start = next;
    }
    buf = buf.slice(start);
    if (buf.length > MAX_EVENT_LINE) throw new StreamCutError(`airlock: stream: a line is longer than ${MAX_EVENT_LINE} bytes`);
  }
  buf += dec.decode();
  if (sse && buf.endsWith("\r")) {
    yield buf.slice(0, -1);
    buf = "";
  }
  if (buf.length > 0) throw new StreamCutError("airlock: the stream was cut in the middle of an event");
}

/** One raw event: its JSON text and, for SSE, the last event id seen. */
export interface RawEvent {
  data: string;
  id?: string;
}

/** Parses the events of a stream. */
export async function* rawEvents(res: AsyncIterable<Buffer>, sse: boolean): AsyncGenerator<RawEvent> {
  if (!sse) {
    for await (const l of lines(res, false)) {
      const t = l.trim();
      if (t) yield { data: t };
    }
    return;
  }
  let data: string[] = [];
  let lastId: string | undefined;
  let pending = false;
  for await (const l of lines(res, true)) {
    if (l === "") {
      if (data.length) yield { data: data.join("\n"), id: lastId };
      data = [];
      pending = false;
      continue;
    }
    if (l.startsWith(":")) continue;
    const i = l.indexOf(":");
    const field = i < 0 ? l : l.slice(0, i);
    let value = i < 0 ? "" : l.slice(i + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    pending = true;
    if (field === "data") data.push(value);
    else if (field === "id" && !value.includes("\0")) lastId = value;
  }
  if (pending) throw new StreamCutError("airlock: the stream was cut in the middle of an event");
}

/** Decodes one event, throwing the daemon's error when the event is one. */
export function decodeEvent<T>(what: string, data: string): T {
  let v: unknown;
  try {
    v = JSON.parse(data);
  } catch (e) {
    throw new AirlockError("bad_answer", `airlock: ${what} stream: bad event ${JSON.stringify(data.slice(0, 80))}: ${(e as Error).message}`);
  }
  const err = (v as { error?: unknown })?.error;
  if (err && typeof err === "object") {
    const b = err as { code?: unknown; message?: unknown };
    throw apiError(String(b.code ?? "internal"), String(b.message ?? "the stream failed"));
  }
  return v as T;
}

/** Turns the failures of reading a body into the SDK's errors. */
export async function* guardBody(res: IncomingMessage, signal?: AbortSignal): AsyncGenerator<Buffer> {
  try {
    for await (const chunk of res) yield chunk as Buffer;
  } catch (e) {
    if (signal?.aborted) throw signal.reason;
    if (e instanceof AirlockError) throw e;
    throw new StreamCutError(`airlock: the stream was cut: ${(e as Error)?.message ?? e}`, { cause: e });
  }
  if (!res.complete) throw new StreamCutError("airlock: the stream was cut");
}

/** Whether a broken stream is worth reopening from its last cursor. */
export function retryableCut(e: unknown): boolean {
  if (e instanceof UnavailableError || e instanceof StreamCutError || e instanceof ConnectionError) return true;
  return false;
}

/**
 * Runs one stream after another until one ends: open(cursor) opens a
 * stream from the last cursor and yields its events. A stream cut in a
 * retryable way is reopened after a backoff; after 30 attempts, or a minute
 * without an event, the last error is thrown.
 */
export async function* reconnecting<T extends { cursor?: string }>(
  open: (cursor: string | undefined) => AsyncGenerator<T>,
  cursor: string | undefined,
  done: (ev: T) => boolean,
  signal?: AbortSignal,
): AsyncGenerator<T> {
  let attempts = 0;
  let since = 0;
  for (;;) {
    let progressed = false;
    try {
      for await (const ev of open(cursor)) {
        progressed = true;
        if (ev.cursor) cursor = ev.cursor;
        yield ev;
        if (done(ev)) return;
      }
      return;
    } catch (e) {
      if (signal?.aborted) throw signal.reason;
      if (!retryableCut(e) || e instanceof TimeoutError) throw e;
      if (progressed || since === 0) {
        attempts = 0;
        since = Date.now();
      }
      attempts++;
      const left = 60_000 - (Date.now() - since);
      if (attempts > 30 || left <= 0) throw e;
      let delay = Math.min(100 * 2 ** Math.min(attempts - 1, 5), 2000);
      if (e instanceof APIError && e.retryAfterMs > delay) delay = e.retryAfterMs;
      await sleep(Math.min(delay, left), signal);
    }
  }
}
