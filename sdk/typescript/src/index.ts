// @airlock/sdk: the TypeScript SDK of airlock's daemon (`airlock serve`).
//
//   import { Sandbox } from "@airlock/sdk";
//   await using sb = await Sandbox.create();
//   const r = await sb.exec(["echo", "hi"]);
//   console.log(r.stdout.toString());

import "./polyfill.js";

export { Airlock, SENT_QUERY } from "./client.js";
export type { Bytes, CreateSandboxInput, ExecOptions, ExecOutput, FileInput, NetworkQuery, OutputChunk, OutputOptions, SandboxFilter } from "./client.js";
export { Sandbox, Process, Files, Network } from "./sandbox.js";
export type { Collected, Command, CreateOptions } from "./sandbox.js";
export { Pty } from "./ws.js";
export type { PtyOptions } from "./ws.js";
export * from "./errors.js";
export { DEFAULT_SOCKET, MAX_RETRY_WAIT_MS, defaultHost, parseHost, parseRetryAfter } from "./transport.js";
export type { Body, CallOptions, ClientOptions, HostSpec } from "./transport.js";
export { DEFAULT_MAX_DOWNLOAD, untarTo, entryName } from "./extract.js";
export type { DownloadOptions, Extracted, SkippedLink } from "./extract.js";
export { tarDir, tarHeader, tarEnd, padding } from "./tar.js";
export { ERROR_CODES, OPERATIONS, SCHEMA_FIELDS } from "./models.js";
export type { ErrorCode, OperationId } from "./models.js";
export type * as models from "./models.js";
export type { Sandbox as SandboxInfo, Process as ProcessInfo, FileInfo, NetworkEvent, NetworkPolicy, APIKey, PTYExit } from "./models.js";
