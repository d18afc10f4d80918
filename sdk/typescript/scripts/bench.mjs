#!/usr/bin/env node
// Drives the built SDK for the benchmarks (cmd/airlock-bench serve's
// TypeScript rows, and BenchmarkSDKs in tests/sdkts):
//
//   node scripts/bench.mjs HOST exec SANDBOX N    exec round trips of `true`
//   node scripts/bench.mjs HOST cycle POLICY N    create+exec+destroy cycles
//
// It prints the samples, in ms, as a JSON array, after a warm-up of 50 exec
// round trips (node's JIT compiles the hot path by then, as in a
// long-running agent) or 1 cycle.

import { Airlock } from "../dist/index.js";

const [, , host, mode, arg, n] = process.argv;
const c = new Airlock({ host, timeoutMs: 120000 });
const out = [];
if (mode === "exec") {
  for (let i = -50; i < Number(n); i++) {
    const t0 = performance.now();
    const r = await c.exec(arg, ["true"]);
    if (r.exit_code !== 0) throw new Error("true exited " + r.exit_code);
    if (i >= 0) out.push(performance.now() - t0);
  }
} else if (mode === "cycle") {
  for (let i = -1; i < Number(n); i++) {
    const t0 = performance.now();
    const sb = await c.createSandbox(arg ? { policy_name: arg } : {});
    const r = await c.exec(sb.id, ["true"]);
    await c.deleteSandbox(sb.id);
    if (r.exit_code !== 0) throw new Error("true exited " + r.exit_code);
    if (i >= 0) out.push(performance.now() - t0);
  }
} else {
  throw new Error(`unknown mode ${mode}: want exec or cycle`);
}
c.close();
console.log(JSON.stringify(out));
