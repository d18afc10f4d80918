// A small tar writer and reader: ustar with PAX records for long names,
// and PAX 1.0 sparse files (as the daemon sends them) on reading.

import { lstat, open, readdir, readlink } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { StreamCutError } from "./errors.js";

const BLOCK = 512;

/** What a tar entry describes. */
export interface TarHeader {
  name: string;
  type: "file" | "dir" | "symlink" | "hardlink" | "other";
  /** The raw type flag ("0", "5", "2", ...). */
  flag: string;
  mode: number;
  size: number;
  mtime: number; // seconds
  linkname: string;
  /** For a sparse file: its size with holes, and its data segments. */
  sparse?: { realSize: number; segments: Array<[offset: number, size: number]> };
}

function octal(n: number, width: number): string {
  return n.toString(8).padStart(width - 1, "0") + "\0";
}

function paxRecord(key: string, value: string): Buffer {
  const body = ` ${key}=${value}\n`;
  let len = Buffer.byteLength(body) + 1;
  for (;;) {
    const total = String(len).length + Buffer.byteLength(body);
    if (total === len) break;
    len = total;
  }
  return Buffer.from(`${len}${body}`, "utf8");
}

function rawHeader(name: string, flag: string, mode: number, size: number, mtime: number, linkname: string): Buffer {
  const b = Buffer.alloc(BLOCK);
  b.write(name, 0, 100, "utf8");
  b.write(octal(mode & 0o7777, 8), 100, "ascii");
  b.write(octal(0, 8), 108, "ascii");
  b.write(octal(0, 8), 116, "ascii");
  b.write(octal(size, 12), 124, "ascii");
  b.write(octal(Math.max(0, Math.floor(mtime)), 12), 136, "ascii");
  b.write("        ", 148, "ascii");
  b.write(flag, 156, "ascii");
  b.write(linkname, 157, 100, "utf8");
  b.write("ustar\0", 257, "ascii");
  b.write("00", 263, "ascii");
  let sum = 0;
  for (const x of b) sum += x;
  b.write(sum.toString(8).padStart(6, "0") + "\0 ", 148, "ascii");
  return b;
}

/** The bytes of one entry's header (with a PAX header first when a name does not fit ustar); its content and padding follow. */
export function tarHeader(h: { name: string; flag: string; mode?: number; size?: number; mtime?: number; linkname?: string }): Buffer {
  const size = h.size ?? 0;
  const link = h.linkname ?? "";
  const ascii = (s: string) => /^[\x20-\x7e]*$/.test(s);
  const needPax = Buffer.byteLength(h.name) > 100 || Buffer.byteLength(link) > 100 || !ascii(h.name) || !ascii(link) || size > 0o77777777777;
  const parts: Buffer[] = [];
  if (needPax) {
    const recs = Buffer.concat([paxRecord("path", h.name), ...(link ? [paxRecord("linkpath", link)] : []), ...(size > 0o77777777777 ? [paxRecord("size", String(size))] : [])]);
    parts.push(rawHeader("PaxHeaders/" + basename(h.name).slice(0, 80), "x", 0o644, recs.length, h.mtime ?? 0, ""), recs, padding(recs.length));
  }
  parts.push(rawHeader(h.name.slice(0, 100), h.flag, h.mode ?? 0o644, size > 0o77777777777 ? 0 : size, h.mtime ?? 0, link.slice(0, 100)));
  return Buffer.concat(parts);
}

/** The zeros that pad n bytes of content to a whole block. */
export function padding(n: number): Buffer {
  return Buffer.alloc((BLOCK - (n % BLOCK)) % BLOCK);
}

/** The end of an archive: two zero blocks. */
export function tarEnd(): Buffer {
  return Buffer.alloc(2 * BLOCK);
}

/**
 * A tar stream of a local file or directory tree, its entries named under
 * its base name ("dir/", "dir/a/b"). Regular files, directories and
 * symbolic links (stored as links, never followed) are archived; sockets,
 * devices and FIFOs are skipped.
 */
export async function* tarDir(src: string): AsyncGenerator<Buffer> {
  const abs = resolve(src);
  const name = basename(abs);
  if (!name || name === "/" || name === ".") throw new Error(`airlock: tar ${src}: cannot archive the root directory`);
  yield* tarWalk(abs, name);
  yield tarEnd();
}

async function* tarWalk(p: string, name: string): AsyncGenerator<Buffer> {
  const st = await lstat(p);
  const mtime = Math.floor(st.mtimeMs / 1000);
  if (st.isFile()) {
    yield tarHeader({ name, flag: "0", mode: st.mode & 0o777, size: st.size, mtime });
    const f = await open(p, "r");
    try {
      let left = st.size;
      const buf = Buffer.allocUnsafe(1 << 20);
      while (left > 0) {
        const { bytesRead } = await f.read(buf, 0, Math.min(buf.length, left), null);
        if (bytesRead === 0) throw new Error(`airlock: tar ${p}: the file shrank while it was archived (${st.size - left} of ${st.size} bytes)`);
        left -= bytesRead;
        yield Buffer.from(buf.subarray(0, bytesRead));
      }
    } finally {
      await f.close();
    }
    yield padding(st.size);
  } else if (st.isDirectory()) {
    yield tarHeader({ name: name + "/", flag: "5", mode: st.mode & 0o777, mtime });
    const names = (await readdir(p)).sort();
    for (const n of names) yield* tarWalk(join(p, n), name + "/" + n);
  } else if (st.isSymbolicLink()) {
    yield tarHeader({ name, flag: "2", mode: st.mode & 0o777, mtime, linkname: await readlink(p) });
  }
}

/** Reads exact byte counts from an async source of chunks. */
export class ByteReader {
  private it: AsyncIterator<Uint8Array>;
  private buf: Buffer = Buffer.alloc(0);
  private eof = false;
  /** Bytes taken from the source so far. */
  count = 0;
  constructor(
    src: AsyncIterable<Uint8Array>,
    private readonly onCount?: (n: number) => void,
  ) {
    this.it = src[Symbol.asyncIterator]();
  }

  private async fill(): Promise<boolean> {
    if (this.eof) return false;
    const r = await this.it.next();
    if (r.done) {
      this.eof = true;
      return false;
    }
    const c = Buffer.from(r.value.buffer, r.value.byteOffset, r.value.byteLength);
    this.count += c.length;
    this.onCount?.(this.count);
    this.buf = this.buf.length ? Buffer.concat([this.buf, c]) : c;
    return true;
  }

  /** Exactly n bytes; null at a clean end (no byte left); a cut throws. */
  async exact(n: number): Promise<Buffer | null> {
    while (this.buf.length < n) {
      if (!(await this.fill())) {
        if (this.buf.length === 0) return null;
        throw new StreamCutError(`airlock: tar: the archive was cut (${this.buf.length} of ${n} bytes of a block)`);
      }
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  /** Up to n bytes (at least one), for copying content; a cut throws. */
  async some(n: number): Promise<Buffer> {
    if (this.buf.length === 0 && !(await this.fill())) throw new StreamCutError("airlock: tar: the archive was cut in the middle of a file");
    const k = Math.min(n, this.buf.length);
    const out = this.buf.subarray(0, k);
    this.buf = this.buf.subarray(k);
    return out;
  }

  async skip(n: number): Promise<void> {
    while (n > 0) n -= (await this.some(n)).length;
  }

  /** Closes the source early. */
  async close(): Promise<void> {
    await this.it.return?.();
  }
}

function cstr(b: Buffer, off: number, len: number): string {
  const s = b.subarray(off, off + len);
  const z = s.indexOf(0);
  return (z < 0 ? s : s.subarray(0, z)).toString("utf8");
}

function num(b: Buffer, off: number, len: number): number {
  const s = b.subarray(off, off + len);
  if (s[0]! & 0x80) {
    // base-256
    let n = 0;
    for (let i = 1; i < s.length; i++) n = n * 256 + s[i]!;
    return n;
  }
  const t = cstr(b, off, len).trim();
  if (t === "") return 0;
  if (!/^[0-7]+$/.test(t)) throw new Error(`airlock: tar: bad number ${JSON.stringify(t)} in a header`);
  return parseInt(t, 8);
}

function parsePax(b: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let s = b.toString("utf8");
  while (s.length) {
    const sp = s.indexOf(" ");
    const len = Number(s.slice(0, sp));
    if (sp <= 0 || !Number.isInteger(len) || len <= sp || len > Buffer.byteLength(s)) throw new Error("airlock: tar: bad PAX record");
    const rec = Buffer.from(s, "utf8").subarray(sp + 1, len - 1).toString("utf8");
    const eq = rec.indexOf("=");
    if (eq < 0) throw new Error("airlock: tar: bad PAX record");
    out[rec.slice(0, eq)] = rec.slice(eq + 1);
    s = Buffer.from(s, "utf8").subarray(len).toString("utf8");
  }
  return out;
}

/** A tar entry being read: its header; read its content with the reader's some() up to size bytes before the next entry. */
export interface TarEntry extends TarHeader {}

/**
 * Reads the entries of a tar stream. For each entry, call body(entry) to
 * get its content as chunks (for a sparse file, the data of its segments in
 * order); content not read is skipped.
 */
export async function* readTar(r: ByteReader): AsyncGenerator<{ header: TarHeader; body: () => AsyncGenerator<Buffer> }> {
  let pax: Record<string, string> = {};
  let longName: string | undefined;
  let longLink: string | undefined;
  for (;;) {
    const blk = await r.exact(BLOCK);
    if (blk === null) return;
    if (blk.every((x) => x === 0)) return; // the end (the second zero block is not needed)
    let sum = 0;
    for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : blk[i]!;
    if (sum !== num(blk, 148, 8)) throw new Error("airlock: tar: bad header checksum (not a tar stream, or a corrupt one)");
    const flag = String.fromCharCode(blk[156]!) === "\0" ? "0" : String.fromCharCode(blk[156]!);
    let size = num(blk, 124, 12);
    const readAll = async () => {
      const parts: Buffer[] = [];
      if (size > 1 << 20) throw new Error("airlock: tar: an extended header is too large");
      let left = size;
      while (left > 0) {
        const c = await r.some(left);
        parts.push(Buffer.from(c));
        left -= c.length;
      }
      await r.skip(padding(size).length);
      return Buffer.concat(parts);
    };
    if (flag === "x") {
      pax = { ...pax, ...parsePax(await readAll()) };
      continue;
    }
    if (flag === "g") {
      await readAll();
      continue;
    }
    if (flag === "L") {
      longName = cstr(await readAll(), 0, size);
      continue;
    }
    if (flag === "K") {
      longLink = cstr(await readAll(), 0, size);
      continue;
    }
    let name = cstr(blk, 0, 100);
    const magic = cstr(blk, 257, 6);
    if (magic === "ustar") {
      const prefix = cstr(blk, 345, 155);
      if (prefix) name = prefix + "/" + name;
    }
    if (longName !== undefined) name = longName;
    if (pax.path !== undefined) name = pax.path;
    let linkname = longLink ?? cstr(blk, 157, 100);
    if (pax.linkpath !== undefined) linkname = pax.linkpath;
    if (pax.size !== undefined) size = Number(pax.size);
    const mtime = pax.mtime !== undefined ? Math.floor(Number(pax.mtime)) : num(blk, 136, 12);
    const header: TarHeader = {
      name,
      flag,
      type: flag === "0" || flag === "7" ? "file" : flag === "5" ? "dir" : flag === "2" ? "symlink" : flag === "1" ? "hardlink" : flag === "S" ? "other" : "other",
      mode: num(blk, 100, 8),
      size,
      mtime,
      linkname,
    };
    const sparse = pax["GNU.sparse.major"] === "1" && pax["GNU.sparse.minor"] === "0";
    if (sparse) {
      header.name = pax["GNU.sparse.name"] ?? name;
      header.sparse = { realSize: Number(pax["GNU.sparse.realsize"] ?? 0), segments: [] };
    } else if (Object.keys(pax).some((k) => k.startsWith("GNU.sparse.")) || flag === "S") {
      throw new Error(`airlock: tar: entry ${JSON.stringify(name)}: an unsupported sparse format`);
    }
    pax = {};
    longName = longLink = undefined;
    let consumed = 0;
    if (header.sparse) {
      // The map: decimal numbers, one a line: the count, then offset and size pairs; padded to a block.
      const nums: number[] = [];
      let text = "";
      let want = -1;
      while (want < 0 || nums.length < 1 + 2 * want) {
        const blk2 = await r.exact(BLOCK);
        if (blk2 === null) throw new StreamCutError("airlock: tar: the archive was cut in a sparse map");
        consumed += BLOCK;
        text += blk2.toString("latin1");
        const parts = text.split("\n");
        text = parts.pop()!;
        for (const p of parts) {
          if (!/^\d+$/.test(p)) throw new Error("airlock: tar: bad sparse map");
          nums.push(Number(p));
          if (nums.length === 1) {
            want = nums[0]!;
            if (want > 1 << 20) throw new Error("airlock: tar: sparse map too large");
          }
          if (want >= 0 && nums.length >= 1 + 2 * want) break;
        }
        if (consumed > size) throw new Error("airlock: tar: bad sparse map");
      }
      for (let i = 0; i < want; i++) header.sparse.segments.push([nums[1 + 2 * i]!, nums[2 + 2 * i]!]);
    }
    const dataSize = size - consumed;
    let left = dataSize;
    const body = async function* (): AsyncGenerator<Buffer> {
      while (left > 0) {
        const c = await r.some(left);
        left -= c.length;
        yield c;
      }
    };
    yield { header, body };
    if (left > 0) await r.skip(left);
    await r.skip(padding(size).length);
  }
}
