// Safe extraction of the tar streams a sandbox sends (downloads), with the
// Go SDK's rules (client/extract.go): nothing is written through a symbolic
// link, no link leading out of the downloaded tree is created, and the
// archive and its files are bounded in size. Everything lands in a fresh
// temporary directory first and is moved into place once the whole archive
// is extracted, so a failure leaves the destination as it was.
//
// Node has no openat(2): the checks are made on paths. They hold against
// what the archive says, not against another local process swapping
// directories under the destination while a download runs.

import { constants } from "node:fs";
import { chmod, lstat, mkdir, mkdtemp, open, readdir, rename, rm, symlink, utimes } from "node:fs/promises";
import { basename, dirname, join, posix } from "node:path";
import { APIError, TooLargeError } from "./errors.js";
import { ByteReader, readTar } from "./tar.js";

/** The default cap of a download: 1 GiB (the daemon's default too). */
export const DEFAULT_MAX_DOWNLOAD = 1 << 30;

/** Options of a download and of the extraction of an archive. */
export interface DownloadOptions {
  /** The most a download may carry, in bytes: the archive's bytes, and the sizes of the files in it (a sparse file counts its holes). Default 1 GiB. */
  maxSize?: number;
  /** A symbolic link of a downloaded tree that leads out of it arrives as a copy of the file it points to (in the sandbox). Without it such a link is left out and listed. */
  followLinks?: boolean;
}

/** A symbolic link an extraction did not create. */
export interface SkippedLink {
  /** The local path the link would have had. */
  name: string;
  /** What it pointed to. */
  target: string;
}

/** What an extraction left out. */
export interface Extracted {
  skippedLinks: SkippedLink[];
}

interface PendingLink {
  target: string;
  replaced: boolean;
  skipped: boolean;
}

/** The top-level name given, in a single download, to an archive whose entries are relative to the directory archived. */
const DOT_TOP = "root";
const MAX_HOPS = 40;

function tooLarge(max: number): TooLargeError {
  return new TooLargeError("too_large", `the archive holds more than ${max} bytes, the limit: raise it (maxSize)`);
}

/** Checks a tar entry's name and returns it clean and relative. */
export function entryName(n: string): string {
  if (n === "") throw new Error("empty name");
  if (n.includes("\0")) throw new Error("NUL in name");
  if (n.startsWith("/")) throw new Error("absolute path refused");
  if (n.split("/").includes("..")) throw new Error('".." refused');
  let c = posix.normalize(n);
  while (c.length > 1 && c.endsWith("/")) c = c.slice(0, -1);
  return c === "./" ? "." : c;
}

async function lstatOrNull(p: string) {
  try {
    return await lstat(p);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT" || (e as NodeJS.ErrnoException).code === "ENOTDIR") return null;
    throw e;
  }
}

class Extraction {
  top = "";
  dot = false;
  links = new Map<string, PendingLink>();
  order: string[] = [];
  dirs = new Map<string, number>();
  skipped: SkippedLink[] = [];
  constructor(
    readonly dir: string,
    readonly single: boolean,
  ) {}

  p(name: string): string {
    return join(this.dir, name);
  }

  async run(src: AsyncIterable<Uint8Array>, max: number): Promise<void> {
    const reader = new ByteReader(src, (n) => {
      if (n > max) throw tooLarge(max);
    });
    let content = 0;
    try {
      for await (const { header: h, body } of readTar(reader)) {
        const fail = (why: string) => new Error(`airlock: untar: entry ${JSON.stringify(h.name)}: ${why}`);
        let name: string;
        try {
          name = entryName(h.name);
        } catch (e) {
          throw fail((e as Error).message);
        }
        if (name === ".") {
          if (h.type !== "dir") throw fail("not a directory");
          if (this.single && this.top === "") {
            this.dot = true;
            this.top = DOT_TOP;
            await mkdir(this.p(DOT_TOP), 0o700);
            this.dirs.set(DOT_TOP, h.mode & 0o777);
          }
          continue;
        }
        if (this.dot) name = posix.join(DOT_TOP, name);
        const top = name.split("/")[0]!;
        if (this.top === "") this.top = top;
        else if (this.single && top !== this.top) throw fail(`a second top-level entry (after ${JSON.stringify(this.top)}): a download is one file or one tree`);
        for (let d = posix.dirname(name); d !== "."; d = posix.dirname(d)) {
          const l = this.links.get(d);
          if (l && !l.replaced) throw fail(`${d} is a symbolic link: nothing is written through one`);
        }
        const parent = posix.dirname(name);
        if (parent !== ".") await mkdir(this.p(parent), { recursive: true, mode: 0o755 });
        const pl = this.links.get(name);
        if (pl) pl.replaced = true;
        const mode = h.mode & 0o777;
        switch (h.type) {
          case "dir": {
            const st = await lstatOrNull(this.p(name));
            if (st && !st.isDirectory()) await rm(this.p(name));
            if (!st || !st.isDirectory()) await mkdir(this.p(name), 0o700);
            this.dirs.set(name, mode);
            break;
          }
          case "file": {
            const size = h.sparse ? h.sparse.realSize : h.size;
            content += size;
            if (content > max) throw tooLarge(max);
            await this.replace(name, fail);
            await this.writeFile(name, h.sparse, body());
            await chmod(this.p(name), mode);
            if (h.mtime > 0) await utimes(this.p(name), h.mtime, h.mtime);
            break;
          }
          case "symlink": {
            if (!h.linkname || h.linkname.includes("\0")) throw fail("bad symbolic link target");
            await this.replace(name, fail);
            if (!this.links.has(name)) this.order.push(name);
            this.links.set(name, { target: h.linkname, replaced: false, skipped: false });
            break;
          }
          default:
            throw fail(`unsupported entry type ${JSON.stringify(h.flag)} (only files, directories and symbolic links)`);
        }
      }
    } finally {
      await reader.close().catch(() => {});
    }
    await this.makeLinks();
  }

  private async replace(name: string, fail: (why: string) => Error): Promise<void> {
    const st = await lstatOrNull(this.p(name));
    if (!st) return;
    if (st.isDirectory()) throw fail("a directory is in the way");
    await rm(this.p(name));
  }

  private async writeFile(name: string, sparse: { realSize: number; segments: Array<[number, number]> } | undefined, body: AsyncGenerator<Buffer>): Promise<void> {
    const f = await open(this.p(name), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
    try {
      if (!sparse) {
        for await (const c of body) await f.write(c, 0, c.length, null);
        return;
      }
      const segs = sparse.segments.slice();
      let seg = 0;
      let inSeg = 0;
      for await (let c of body) {
        while (c.length > 0) {
          while (seg < segs.length && inSeg >= segs[seg]![1]) {
            seg++;
            inSeg = 0;
          }
          if (seg >= segs.length) throw new Error(`airlock: untar: entry ${JSON.stringify(name)}: sparse data past its map`);
          const [off, len] = segs[seg]!;
          const k = Math.min(c.length, len - inSeg);
          await f.write(c, 0, k, off + inSeg);
          inSeg += k;
          c = c.subarray(k);
        }
      }
      await f.truncate(sparse.realSize);
    } finally {
      await f.close();
    }
  }

  /** Creates the pending links that lead only within their tree; the others are listed as skipped. Leaving one out can change where another leads, so the check runs until nothing changes. */
  private async makeLinks(): Promise<void> {
    for (let changed = true; changed; ) {
      changed = false;
      for (const name of this.order) {
        const l = this.links.get(name)!;
        if (!l.replaced && !l.skipped && !(await this.leadsInside(name))) {
          l.skipped = true;
          changed = true;
        }
      }
    }
    for (const name of this.order) {
      const l = this.links.get(name)!;
      if (l.replaced) continue;
      if (l.skipped) this.skipped.push({ name, target: l.target });
      else await symlink(l.target, this.p(name));
    }
  }

  /** Whether the pending link name, followed one name at a time, leads only within its top-level entry (see client/extract.go). */
  private async leadsInside(name: string): Promise<boolean> {
    const slash = name.indexOf("/");
    if (slash < 0) return false;
    const top = name.slice(0, slash);
    const rest = name.slice(slash + 1);
    const l0 = this.links.get(name)!;
    if (l0.target.startsWith("/")) return false;
    let cur: string[] = posix.dirname(rest) === "." ? [] : posix.dirname(rest).split("/");
    let pending = l0.target.split("/");
    let missing = false;
    let hops = 0;
    while (pending.length > 0) {
      const c = pending.shift()!;
      if (c === "" || c === ".") continue;
      if (c === "..") {
        if (cur.length === 0 || missing) return false;
        cur = cur.slice(0, -1);
        continue;
      }
      const next = [...cur, c];
      if (missing) {
        cur = next;
        continue;
      }
      const full = posix.join(top, next.join("/"));
      const l = this.links.get(full);
      if (l && !l.replaced) {
        if (l.skipped || l.target.startsWith("/")) return false;
        if (++hops > MAX_HOPS) return false;
        pending = [...l.target.split("/"), ...pending];
        continue;
      }
      const st = await lstatOrNull(this.p(full));
      if (!st || !st.isDirectory()) missing = true;
      cur = next;
    }
    return true;
  }

  /** Gives the archive's directories their modes once in place, deepest first. */
  async chmodDirs(where: (name: string) => string): Promise<void> {
    const names = [...this.dirs.keys()].sort((a, b) => b.split("/").length - a.split("/").length);
    for (const n of names) await chmod(where(n), this.dirs.get(n)!);
  }
}

/** Checks, before anything moves, that from can be moved to to: to is absent, a file or link (replaced), or a directory where from is one too (merged into). */
async function checkPlace(from: string, to: string, shown: string): Promise<void> {
  const f = await lstat(from);
  const t = await lstatOrNull(to);
  if (!t) return;
  if (t.isSymbolicLink() && f.isDirectory()) throw new Error(`${shown} is a symbolic link where the download has a directory: nothing is written through one`);
  if (t.isDirectory() && !f.isDirectory()) throw new Error(`${shown} is a directory where the download has a file`);
  if (!t.isDirectory()) return;
  for (const e of await readdir(from)) await checkPlace(join(from, e), join(to, e), join(shown, e));
}

/** Moves from to to, as checkPlace allowed. */
async function movePlace(from: string, to: string): Promise<void> {
  const f = await lstat(from);
  const t = await lstatOrNull(to);
  if (!t) return rename(from, to);
  if (t.isDirectory() && f.isDirectory()) {
    for (const e of await readdir(from)) await movePlace(join(from, e), join(to, e));
    return;
  }
  if (!f.isDirectory()) return rename(from, to);
  await rm(to);
  await rename(from, to);
}

function wrap(e: unknown, what: string): unknown {
  if (e instanceof APIError) return e; // the daemon's word, or a size limit
  if (e instanceof Error && !e.message.startsWith("airlock:")) return new Error(`airlock: ${what}: ${e.message}`, { cause: e });
  return e;
}

/**
 * Extracts a tar stream into the existing directory dst (see the rules at
 * the top of this file). An existing file or link is replaced, an existing
 * directory merged into; an existing link where the archive has a
 * directory is refused before anything moves.
 */
export async function untarTo(dst: string, src: AsyncIterable<Uint8Array>, opts: DownloadOptions = {}): Promise<Extracted> {
  const max = opts.maxSize && opts.maxSize > 0 ? opts.maxSize : DEFAULT_MAX_DOWNLOAD;
  const tmp = await mkdtemp(join(dst, ".airlock-untar-"));
  try {
    const x = new Extraction(tmp, false);
    await x.run(src, max);
    const tops = await readdir(tmp);
    for (const t of tops) await checkPlace(join(tmp, t), join(dst, t), join(dst, t));
    for (const t of tops) await movePlace(join(tmp, t), join(dst, t));
    await x.chmodDirs((n) => join(dst, n));
    return { skippedLinks: x.skipped.map((s) => ({ name: join(dst, s.name), target: s.target })) };
  } catch (e) {
    throw wrap(e, "untar");
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/**
 * Extracts the archive of one downloaded file or tree as the local path dst.
 * dst's parent must exist; dst must not be a symbolic link (it is neither
 * written through nor replaced); a file there is replaced, a directory
 * merged into with a tree. A failure leaves nothing new behind.
 */
export async function extractDownload(dst: string, src: () => Promise<AsyncIterable<Uint8Array>>, opts: DownloadOptions = {}): Promise<Extracted> {
  const parent = dirname(dst);
  const base = basename(dst);
  if (base === "" || base === "." || base === ".." || base === "/") {
    throw new Error(`airlock: download to ${dst}: name the copy (a path whose last part is not ${JSON.stringify(base)})`);
  }
  const st = await lstatOrNull(dst);
  if (st?.isSymbolicLink()) {
    throw new Error(`airlock: download to ${dst}: it is a symbolic link, which a download neither writes through nor replaces: remove it, or name the directory it points to`);
  }
  const max = opts.maxSize && opts.maxSize > 0 ? opts.maxSize : DEFAULT_MAX_DOWNLOAD;
  const stream = await src();
  let tmp: string;
  try {
    tmp = await mkdtemp(join(parent, ".airlock-download-"));
  } catch (e) {
    const it = (stream as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
    await it.return?.();
    throw wrap(e, `download to ${dst}`);
  }
  try {
    const x = new Extraction(tmp, true);
    await x.run(stream, max);
    if (x.top === "") throw new Error("the archive is empty");
    const from = join(tmp, x.top);
    if (!(await lstatOrNull(from))) throw new Error(`the archive is a symbolic link that was left out (${x.top})`);
    await checkPlace(from, dst, dst);
    await movePlace(from, dst);
    const under = (n: string) => join(parent, base + n.slice(x.top.length));
    await x.chmodDirs(under);
    return { skippedLinks: x.skipped.map((s) => ({ name: under(s.name), target: s.target })) };
  } catch (e) {
    throw wrap(e, `download to ${dst}`);
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}
