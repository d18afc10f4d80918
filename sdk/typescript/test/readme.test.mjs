// The README's TypeScript quick start, as a user would paste it: compiled
// with strict settings against the built package, then run against the
// unix-socket daemon.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { env, unixClient } from "./helpers.mjs";

const run = promisify(execFile);
const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** The ```ts block after the README's typescript-quickstart marker. */
export function quickStart(readme) {
  const i = readme.indexOf("<!-- typescript-quickstart -->");
  assert.ok(i >= 0, "the README has no typescript-quickstart marker");
  const m = /```ts\n([\s\S]*?)```/.exec(readme.slice(i));
  assert.ok(m, "no ```ts block after the marker");
  return m[1];
}

test("the README's TypeScript quick start compiles strict and runs, and deletes its sandbox", async (t) => {
  const code = quickStart(await readFile(env("AIRLOCK_README"), "utf8"));
  const dir = await mkdtemp(join(pkg, ".readme-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await mkdir(join(dir, "node_modules", "@airlock"), { recursive: true });
  await symlink(pkg, join(dir, "node_modules", "@airlock", "sdk"));
  await writeFile(join(dir, "package.json"), JSON.stringify({ type: "module", private: true }));
  await writeFile(
    join(dir, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", lib: ["ES2022", "esnext.disposable"],
        types: ["node"], typeRoots: [join(pkg, "node_modules", "@types")], strict: true, noUncheckedIndexedAccess: true,
        noImplicitReturns: true, exactOptionalPropertyTypes: true, skipLibCheck: false, outDir: "out",
      },
      files: ["quickstart.ts"],
    }),
  );
  await writeFile(join(dir, "quickstart.ts"), code);
  const tsc = join(pkg, "node_modules", "typescript", "bin", "tsc");
  try {
    await run(process.execPath, [tsc, "-p", dir], { cwd: dir, timeout: 120_000 });
  } catch (e) {
    assert.fail(`the quick start does not compile:\n${e.stdout}${e.stderr}`);
  }
  const c = unixClient();
  t.after(() => c.close());
  const demo = async () => (await c.listSandboxes({ labels: { task: "demo" } })).sandboxes.map((s) => s.id);
  const before = await demo();
  const { stdout } = await run(process.execPath, [join(dir, "out", "quickstart.js")], {
    cwd: dir,
    timeout: 120_000,
    env: { ...process.env, AIRLOCK_HOST: env("AIRLOCK_TEST_UNIX"), AIRLOCK_API_KEY: "" },
  });
  assert.match(stdout, /^0 42\n/);
  assert.match(stdout, /hello from \/workspace\n/);
  assert.match(stdout, /not found: .*no-such-tool/);
  assert.deepEqual(await demo(), before, "the quick start's sandbox was not deleted");
});
