// Drives `airlock mcp` with the official TypeScript MCP SDK's client: every
// tool, with checks. The client validates each structured result against
// the tool's output schema. Run by tests/mcp TestTypeScriptClient, which
// sets AIRLOCK_BIN, MCP_ARGS (a JSON array) and NET_PORT.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

let checks = 0;
function check(cond, what, detail) {
  if (!cond) {
    console.error(`FAIL: ${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
    process.exit(1);
  }
  checks++;
}

const transport = new StdioClientTransport({
  command: process.env.AIRLOCK_BIN,
  args: JSON.parse(process.env.MCP_ARGS),
  stderr: "inherit",
});
const client = new Client({ name: "airlock-ts-test", version: "1.0.0" });
await client.connect(transport);

const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("");

async function ok(name, args, options) {
  const r = await client.callTool({ name, arguments: args }, undefined, options);
  check(!r.isError, `${name} succeeds`, text(r));
  check(r.structuredContent && typeof r.structuredContent === "object", `${name} has structured content`);
  check(text(r).length > 0, `${name} has text`);
  return r.structuredContent;
}

async function fails(name, args, ...want) {
  const r = await client.callTool({ name, arguments: args });
  check(r.isError === true, `${name} fails`, r);
  for (const w of want) check(text(r).includes(w), `${name}'s error holds ${w}`, text(r));
}

// The tools and their schemas.
const { tools } = await client.listTools();
const names = tools.map((t) => t.name).sort();
check(JSON.stringify(names) === JSON.stringify(["create_sandbox", "destroy_sandbox", "list_files", "list_sandboxes", "network_audit", "read_file",
  "read_output", "run_command", "start_command", "stop_command", "write_file", "write_stdin"]), "the 12 tools", names);
for (const t of tools) check(t.outputSchema && t.outputSchema.type === "object" && t.description.length > 40, `${t.name} has an output schema and a description`);
const create = tools.find((t) => t.name === "create_sandbox");
check(JSON.stringify(create.inputSchema.properties.policy.enum) === JSON.stringify(["default", "net"]), "the policy enum", create.inputSchema.properties.policy);

// Sandboxes and the operator's limits.
await fails("create_sandbox", { policy: "evil" }, "evil");
const a = await ok("create_sandbox", {});
const b = await ok("create_sandbox", { policy: "net", timeout_minutes: 20 });
check(a.state === "running" && a.policy === "default" && b.policy === "net", "created", [a, b]);
await fails("create_sandbox", {}, "--max-sandboxes 2");
const list = await ok("list_sandboxes", {});
check(list.sandboxes.length === 2 && list.max_sandboxes === 2, "list_sandboxes", list);
await fails("run_command", { sandbox_id: "sb-unknown", command: "true" }, "unknown sandbox_id");

// run_command.
let r = await ok("run_command", { sandbox_id: a.sandbox_id, command: "echo hi; echo err >&2; exit 4" });
check(r.exit_code === 4 && r.stdout === "hi\n" && r.stderr === "err\n" && r.timed_out === false, "run_command", r);
r = await ok("run_command", { sandbox_id: a.sandbox_id, argv: ["printf", "%s", "x y"] });
check(r.stdout === "x y", "run_command argv", r);
r = await ok("run_command", { sandbox_id: a.sandbox_id, command: "rev", stdin: "abc\n" });
check(r.stdout === "cba\n", "run_command stdin", r);
r = await ok("run_command", { sandbox_id: a.sandbox_id, command: "echo s; sleep 20", timeout_seconds: 1 });
check(r.timed_out === true && r.stdout === "s\n", "run_command timeout", r);
r = await ok("run_command", { sandbox_id: a.sandbox_id, command: "seq 1 20000" });
check(r.stdout_bytes === 108894 && r.stdout_bytes_cut === 108894 - 32768 && r.stdout.includes(`[... airlock: ${108894 - 32768} bytes cut here`) &&
  r.stdout.startsWith("1\n2\n3\n") && r.stdout.endsWith("19999\n20000\n"), "run_command truncation marker", r.stdout.length);
await fails("run_command", { sandbox_id: a.sandbox_id, argv: ["/no/such"] }, "command_not_found");

// A command longer than the request timeout completes thanks to progress;
// without resetting the timeout on progress, the same request times out.
let progress = 0;
r = await ok("run_command", { sandbox_id: a.sandbox_id, command: "sleep 12; echo late" },
  { timeout: 8000, resetTimeoutOnProgress: true, onprogress: () => { progress++; } });
check(r.stdout === "late\n" && progress >= 1, "a 12 s command under an 8 s request timeout, with progress", { r, progress });
let timedOut = false;
try {
  await client.callTool({ name: "run_command", arguments: { sandbox_id: a.sandbox_id, command: "sleep 12; echo late" } }, undefined,
    { timeout: 8000, onprogress: () => {} });
} catch (e) {
  timedOut = /timed out/i.test(String(e));
}
check(timedOut, "the same request without resetting its timeout times out");

// Background processes.
const p = await ok("start_command", { sandbox_id: a.sandbox_id, command: "echo ready; read x; echo got $x" });
let o = await ok("read_output", { sandbox_id: a.sandbox_id, process_id: p.process_id, cursor: p.cursor, wait_seconds: 20 });
check(o.stdout === "ready\n" && o.running === true && o.finished === false, "read_output", o);
const w = await ok("write_stdin", { sandbox_id: a.sandbox_id, process_id: p.process_id, data: "it\n", close_stdin: true });
check(w.bytes_written === 3 && w.closed === true, "write_stdin", w);
let out = "";
for (let i = 0; !o.finished; i++) {
  check(i < 50, "read_output finishes");
  o = await ok("read_output", { sandbox_id: a.sandbox_id, process_id: p.process_id, cursor: o.cursor, wait_seconds: 10 });
  out += o.stdout;
}
check(out === "got it\n" && o.exit_code === 0, "read_output from the cursor", { out, o });
const sl = await ok("start_command", { sandbox_id: a.sandbox_id, argv: ["sleep", "300"] });
const st = await ok("stop_command", { sandbox_id: a.sandbox_id, process_id: sl.process_id });
check(st.state === "exited" && st.signal === 15, "stop_command", st);
await fails("read_output", { sandbox_id: a.sandbox_id, process_id: "p-unknown" }, "not_found");

// Files.
let wf = await ok("write_file", { sandbox_id: a.sandbox_id, path: "src/main.txt", content: "héllo\n" });
check(wf.path === "/workspace/src/main.txt" && wf.bytes === 7, "write_file", wf);
let f = await ok("read_file", { sandbox_id: a.sandbox_id, path: "/workspace/src/main.txt" });
check(f.encoding === "utf-8" && f.content === "héllo\n" && f.size === 7, "read_file", f);
const bin = Buffer.from([0, 159, 146, 150, 255]).toString("base64");
await ok("write_file", { sandbox_id: a.sandbox_id, path: "b.bin", content: bin, encoding: "base64" });
f = await ok("read_file", { sandbox_id: a.sandbox_id, path: "b.bin" });
check(f.encoding === "base64" && f.content === bin, "read_file binary", f);
const lf = await ok("list_files", { sandbox_id: a.sandbox_id });
check(lf.entries.some((e) => e.name === "src" && e.type === "dir") && lf.entries.some((e) => e.name === "b.bin" && e.size === 5), "list_files", lf);
await fails("read_file", { sandbox_id: a.sandbox_id, path: "/etc/hostname" }, "outside /workspace");
await fails("write_file", { sandbox_id: a.sandbox_id, path: "../x", content: "x" }, "outside /workspace");
await fails("list_files", { sandbox_id: a.sandbox_id, path: "/" }, "outside /workspace");

// The network audit.
const port = process.env.NET_PORT;
r = await ok("run_command", { sandbox_id: b.sandbox_id, command: `curl -s -m 10 http://api.test:${port}/; echo; curl -s -m 10 -o /dev/null -w '%{http_code}' http://other.test:${port}/` });
check(r.stdout === `hello api.test:${port}\n403`, "egress", r);
const au = await ok("network_audit", { sandbox_id: b.sandbox_id });
check(au.events.some((e) => e.host === "api.test" && e.allowed) && au.events.some((e) => e.host === "other.test" && !e.allowed), "network_audit", au);
const den = await ok("network_audit", { sandbox_id: b.sandbox_id, only: "denied" });
check(den.events.length === 1 && den.events[0].host === "other.test", "network_audit denied", den);

// Destroy.
const d = await ok("destroy_sandbox", { sandbox_id: a.sandbox_id });
check(d.destroyed === true, "destroy_sandbox", d);
await fails("run_command", { sandbox_id: a.sandbox_id, command: "true" }, "unknown sandbox_id");
const l2 = await ok("list_sandboxes", {});
check(l2.sandboxes.length === 1 && l2.sandboxes[0].sandbox_id === b.sandbox_id, "list_sandboxes after destroy", l2);

await client.close();
console.log(`${checks} checks passed`);
