// Archives as a hostile sandbox could send them, extracted with the Go
// SDK's download rules: each refusal next to the archive it allows.

import { test } from "node:test";
import assert from "node:assert/strict";
import { lstat, mkdir, readFile, readdir, readlink, stat, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { StreamCutError, TooLargeError, padding, tarDir, tarEnd, tarHeader, untarTo } from "../dist/index.js";
import { tempDir } from "./helpers.mjs";

/** An archive of entries: [name, flag, content|linkname, mode]. */
function archive(entries, { end = true } = {}) {
  const parts = [];
  for (const [name, flag, x, mode] of entries) {
    if (flag === "2" || flag === "1") parts.push(tarHeader({ name, flag, linkname: x, mode: mode ?? 0o777 }));
    else if (flag === "0") {
      const b = Buffer.from(x ?? "");
      parts.push(tarHeader({ name, flag, size: b.length, mode: mode ?? 0o644 }), b, padding(b.length));
    } else parts.push(tarHeader({ name, flag, mode: mode ?? 0o755 }));
  }
  if (end) parts.push(tarEnd());
  return Buffer.concat(parts);
}

async function* chunks(buf, size = 1000) {
  for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size);
}

async function snapshot(dir) {
  const out = {};
  async function walk(d, rel) {
    for (const n of (await readdir(d)).sort()) {
      const p = join(d, n);
      const st = await lstat(p);
      const r = rel ? rel + "/" + n : n;
      if (st.isSymbolicLink()) out[r] = "-> " + (await readlink(p));
      else if (st.isDirectory()) {
        out[r + "/"] = (st.mode & 0o777).toString(8);
        await walk(p, r);
      } else out[r] = (await readFile(p)).toString() + " " + (st.mode & 0o777).toString(8);
    }
  }
  await walk(dir, "");
  return out;
}

test("tarDir and untarTo: a tree round trip keeps files, modes and links inside it", async (t) => {
  const d = await tempDir(t);
  const src = join(d, "src");
  await mkdir(join(src, "a/b"), { recursive: true });
  await writeFile(join(src, "a/b/f.txt"), "hello", { mode: 0o640 });
  await writeFile(join(src, "x.sh"), "#!/bin/sh\n", { mode: 0o755 });
  await symlink("b/f.txt", join(src, "a/link"));
  const dst = join(d, "dst");
  await mkdir(dst);
  const res = await untarTo(dst, tarDir(src));
  assert.deepEqual(res.skippedLinks, []);
  assert.deepEqual(await snapshot(join(dst, "src")), await snapshot(src));
  assert.equal(await readFile(join(dst, "src/a/link"), "utf8"), "hello");
});

for (const [what, name] of [
  ["an absolute name", "/etc/evil"],
  ["a name climbing out with ..", "top/../../evil"],
]) {
  test(`${what} is refused and the destination is left as it was`, async (t) => {
    const dst = await tempDir(t);
    await writeFile(join(dst, "keep"), "old");
    const before = await snapshot(dst);
    await assert.rejects(untarTo(dst, chunks(archive([["top/", "5"], ["top/ok", "0", "fine"], [name, "0", "bad"]]))), /refused/);
    assert.deepEqual(await snapshot(dst), before);
    // The control: the same archive without it lands.
    await untarTo(dst, chunks(archive([["top/", "5"], ["top/ok", "0", "fine"]])));
    assert.equal(await readFile(join(dst, "top/ok"), "utf8"), "fine");
  });
}

test("links leading out of the tree are left out and listed; links inside are made", async (t) => {
  const dst = await tempDir(t);
  const res = await untarTo(
    dst,
    chunks(
      archive([
        ["t/", "5"],
        ["t/f", "0", "data"],
        ["t/in", "2", "f"],
        ["t/abs", "2", "/etc/passwd"],
        ["t/up", "2", "../../etc/passwd"],
        ["t/d/", "5"],
        ["t/d/ok", "2", "../f"],
        ["t/chain1", "2", "chain2/../../x"],
        ["t/chain2", "2", "d"],
        ["top", "2", "t"],
      ]),
    ),
  );
  assert.deepEqual(res.skippedLinks.map((s) => [s.name.slice(dst.length + 1), s.target]).sort(), [
    ["t/abs", "/etc/passwd"],
    ["t/chain1", "chain2/../../x"],
    ["t/up", "../../etc/passwd"],
    ["top", "t"],
  ]);
  assert.equal(await readlink(join(dst, "t/in")), "f");
  assert.equal(await readFile(join(dst, "t/d/ok"), "utf8"), "data");
  await assert.rejects(lstat(join(dst, "t/abs")), { code: "ENOENT" });
  await assert.rejects(lstat(join(dst, "top")), { code: "ENOENT" });
});

test("nothing is written through a link of the archive", async (t) => {
  const dst = await tempDir(t);
  const outside = await tempDir(t);
  await assert.rejects(
    untarTo(dst, chunks(archive([["t/", "5"], ["t/l", "2", outside], ["t/l/pwned", "0", "x"]]))),
    /symbolic link: nothing is written through one/,
  );
  assert.deepEqual(await readdir(outside), []);
  assert.deepEqual(await readdir(dst), []);
  // A link of the destination where the archive has a directory is refused too.
  await symlink(outside, join(dst, "t"));
  await assert.rejects(untarTo(dst, chunks(archive([["t/", "5"], ["t/f", "0", "x"]]))), /symbolic link where the download has a directory/);
  assert.deepEqual(await readdir(outside), []);
});

test("size limits: the files' sizes and the archive's bytes", async (t) => {
  const dst = await tempDir(t);
  const big = "x".repeat(5000);
  await assert.rejects(untarTo(dst, chunks(archive([["t/", "5"], ["t/big", "0", big]])), { maxSize: 4096 }), TooLargeError);
  assert.deepEqual(await readdir(dst), []);
  // Many small entries: the archive's bytes count, whatever the files' sizes.
  const many = Array.from({ length: 20 }, (_, i) => [`t/d${i}/`, "5"]);
  await assert.rejects(untarTo(dst, chunks(archive([["t/", "5"], ...many])), { maxSize: 8192 }), TooLargeError);
  assert.deepEqual(await readdir(dst), []);
  await untarTo(dst, chunks(archive([["t/", "5"], ["t/big", "0", big]])), { maxSize: 64 << 10 });
  assert.equal((await stat(join(dst, "t/big"))).size, 5000);
});

test("FIFOs, devices and hard links are refused", async (t) => {
  const dst = await tempDir(t);
  for (const flag of ["6", "3", "4", "1"]) {
    await assert.rejects(untarTo(dst, chunks(archive([["t/", "5"], ["t/x", flag, flag === "1" ? "t/y" : ""]]))), /unsupported entry type/, flag);
  }
  assert.deepEqual(await readdir(dst), []);
});

test("a cut archive is a StreamCutError and leaves nothing", async (t) => {
  const dst = await tempDir(t);
  const a = archive([["t/", "5"], ["t/f", "0", "y".repeat(3000)]], { end: false });
  await assert.rejects(untarTo(dst, chunks(a.subarray(0, a.length - 700))), StreamCutError);
  assert.deepEqual(await readdir(dst), []);
});

test("a PAX 1.0 sparse entry lands with its data at its offsets", async (t) => {
  const dst = await tempDir(t);
  const rec = (k, v) => {
    const body = ` ${k}=${v}\n`;
    let n = body.length + 2;
    while (String(n).length + body.length !== n) n = String(n).length + body.length;
    return n + body;
  };
  const pax = Buffer.from(rec("GNU.sparse.major", "1") + rec("GNU.sparse.minor", "0") + rec("GNU.sparse.name", "t/sp") + rec("GNU.sparse.realsize", "1048576"));
  const m = Buffer.from("2\n0\n3\n1048570\n6\n");
  const map = Buffer.concat([m, Buffer.alloc(512 - m.length)]);
  const data = Buffer.from("abcUVWXYZ");
  const body = Buffer.concat([map, data]);
  const a = Buffer.concat([
    tarHeader({ name: "t/", flag: "5" }),
    tarHeader({ name: "PaxHeaders/sp", flag: "x", size: pax.length }), pax, padding(pax.length),
    tarHeader({ name: "t/GNUSparseFile.0/sp", flag: "0", size: body.length }), body, padding(body.length),
    tarEnd(),
  ]);
  await untarTo(dst, chunks(a, 100));
  const got = await readFile(join(dst, "t/sp"));
  assert.equal(got.length, 1048576);
  assert.equal(got.subarray(0, 3).toString(), "abc");
  assert.equal(got.subarray(1048570).toString(), "UVWXYZ");
  assert.ok(got.subarray(3, 1048570).every((x) => x === 0));
});
