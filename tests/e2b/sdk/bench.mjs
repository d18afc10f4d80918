// Benchmark of the E2B compatibility layer (run by `airlock-bench serve`):
// create -> first command through the E2B SDK (warm pool), and one 20-step
// workload timed end to end three ways from the same process: through the
// E2B SDK; through E2B's protocol with plain fetch (the SDK's requests
// without the SDK's own client-side work, so that the layer's overhead
// shows alone); through airlock's native /v1 API with plain fetch; and,
// when AIRLOCK_TS_SDK names the built airlock TypeScript SDK, through it
// (SDK against SDK). Prints one JSON object of millisecond samples.
import { Sandbox } from 'e2b'

const N = Number(process.env.BENCH_N || 20)
const API = process.env.E2B_API_URL
const KEY = process.env.E2B_API_KEY
const now = () => Number(process.hrtime.bigint()) / 1e6

async function e2bCreateFirst() {
  const t0 = now()
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  await sbx.commands.run('true')
  const d = now() - t0
  await sbx.kill()
  return d
}

async function e2bWorkload() {
  const t0 = now()
  const sbx = await Sandbox.create({ timeoutMs: 120_000 }) // 1
  await sbx.commands.run('echo hi') // 2
  await sbx.files.write('a.txt', 'hello') // 3
  await sbx.files.read('a.txt') // 4
  await sbx.files.list('/workspace') // 5
  await sbx.files.makeDir('d') // 6
  await sbx.files.exists('a.txt') // 7
  await sbx.commands.run('echo $X', { envs: { X: '1' } }) // 8
  await sbx.getInfo() // 9
  await sbx.setTimeout(120_000) // 10
  await sbx.files.write('d/b.txt', 'world') // 11
  await sbx.files.read('d/b.txt') // 12
  await sbx.files.rename('d/b.txt', 'd/c.txt') // 13
  await sbx.files.remove('d/c.txt') // 14
  await sbx.commands.run('true') // 15
  await sbx.commands.list() // 16
  await sbx.commands.run('cat a.txt') // 17
  await sbx.files.getInfo('a.txt') // 18
  await sbx.commands.run('ls') // 19
  await sbx.kill() // 20
  return now() - t0
}

async function call(method, path, body, raw) {
  const headers = { Authorization: 'Bearer ' + KEY }
  if (body !== undefined && !raw) headers['Content-Type'] = 'application/json'
  const res = await fetch(API + path, { method, headers, body: raw ? body : body === undefined ? undefined : JSON.stringify(body) })
  const text = await res.text()
  if (res.status >= 400) throw new Error(`${method} ${path}: ${res.status} ${text}`)
  return text ? (res.headers.get('content-type') || '').includes('json') ? JSON.parse(text) : text : null
}

async function nativeWorkload() {
  const t0 = now()
  const sb = await call('POST', '/v1/sandboxes', {}) // 1
  const id = sb.id
  // The same process the E2B SDK starts for commands.run: a login bash.
  const exec = (cmd, env) => call('POST', `/v1/sandboxes/${id}/exec`, { argv: ['/bin/bash', '-l', '-c', cmd], env })
  const q = (p) => '?path=' + encodeURIComponent(p)
  await exec('echo hi') // 2
  await call('PUT', `/v1/sandboxes/${id}/files` + q('a.txt'), 'hello', true) // 3
  await call('GET', `/v1/sandboxes/${id}/files` + q('a.txt')) // 4
  await call('GET', `/v1/sandboxes/${id}/files/list` + q('/workspace')) // 5
  await call('POST', `/v1/sandboxes/${id}/files/mkdir`, { path: 'd' }) // 6
  await call('GET', `/v1/sandboxes/${id}/files/stat` + q('a.txt')) // 7
  await exec('echo $X', { X: '1' }) // 8
  await call('GET', `/v1/sandboxes/${id}`) // 9
  await call('POST', `/v1/sandboxes/${id}/timeout`, { timeout_seconds: 120 }) // 10
  await call('PUT', `/v1/sandboxes/${id}/files` + q('d/b.txt'), 'world', true) // 11
  await call('GET', `/v1/sandboxes/${id}/files` + q('d/b.txt')) // 12
  await call('POST', `/v1/sandboxes/${id}/files/rename`, { from: 'd/b.txt', to: 'd/c.txt' }) // 13
  await call('DELETE', `/v1/sandboxes/${id}/files` + q('d/c.txt')) // 14
  await exec('true') // 15
  await call('GET', `/v1/sandboxes/${id}/processes`) // 16
  await exec('cat a.txt') // 17
  await call('GET', `/v1/sandboxes/${id}/files/stat` + q('a.txt')) // 18
  await exec('ls') // 19
  await call('DELETE', `/v1/sandboxes/${id}`) // 20
  return now() - t0
}

// Each timed part starts from the same state: the warm pool full again
// (its refill after the previous create is work of the daemon that would
// otherwise land inside whichever workload runs next) and, from round to
// round, the workloads take turns at going first.
const POOL = Number(process.env.BENCH_POOL || 0)
async function poolFull() {
  if (!POOL) return
  for (let i = 0; i < 1000; i++) { // 10 s at most
    const text = await (await fetch(API + '/metrics')).text()
    const m = /^airlock_pool_ready\{image="",policy="default"\} (\d+)/m.exec(text)
    if (m && Number(m[1]) >= POOL) return
    await new Promise((r) => setTimeout(r, 10))
  }
}

// The E2B SDK's requests, made with plain fetch: the same paths, bodies
// and encodings (Connect JSON, a multipart upload, a Connect stream for
// each command).
async function e2bFetchWorkload() {
  const t0 = now()
  const sb = await call('POST', '/v2/sandboxes', { templateID: 'base', timeout: 120 }) // 1
  const id = sb.sandboxID
  const H = { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': sb.envdAccessToken }
  const envd = async (method, path, body, headers) => {
    const res = await fetch(API + path, { method, headers: { ...H, ...headers }, body })
    const buf = Buffer.from(await res.arrayBuffer())
    if (res.status >= 400) throw new Error(`${method} ${path}: ${res.status} ${buf}`)
    return buf
  }
  const rpc = (m, msg) => envd('POST', m, JSON.stringify(msg), { 'Content-Type': 'application/json' })
  const run = async (cmd, envs) => {
    const j = Buffer.from(JSON.stringify({ process: { cmd: '/bin/bash', args: ['-l', '-c', cmd], envs }, stdin: false }))
    const req = Buffer.alloc(5 + j.length)
    req.writeUInt32BE(j.length, 1)
    j.copy(req, 5)
    const b = await envd('POST', '/process.Process/Start', req, { 'Content-Type': 'application/connect+json' })
    // The stream's frames: events, then the end of stream (flag 2).
    let end = false
    for (let o = 0; o + 5 <= b.length; o += 5 + b.readUInt32BE(o + 1)) {
      const msg = JSON.parse(b.subarray(o + 5, o + 5 + b.readUInt32BE(o + 1)))
      if (b[o] & 2 && msg.error) throw new Error(`${cmd}: ${JSON.stringify(msg.error)}`)
      if (msg.event?.end) end = true
    }
    if (!end) throw new Error(`${cmd}: no end event`)
  }
  const write = (p, data) => {
    const form = new FormData()
    form.append('file', new Blob([data]), p)
    return envd('POST', '/files?path=' + encodeURIComponent(p), form)
  }
  const read = (p) => envd('GET', '/files?path=' + encodeURIComponent(p))
  const F = '/filesystem.Filesystem/'
  await run('echo hi') // 2
  await write('a.txt', 'hello') // 3
  await read('a.txt') // 4
  await rpc(F + 'ListDir', { path: '/workspace', depth: 1 }) // 5
  await rpc(F + 'MakeDir', { path: 'd' }) // 6
  await rpc(F + 'Stat', { path: 'a.txt' }) // 7
  await run('echo $X', { X: '1' }) // 8
  await call('GET', `/sandboxes/${id}`) // 9
  await call('POST', `/sandboxes/${id}/timeout`, { timeout: 120 }) // 10
  await write('d/b.txt', 'world') // 11
  await read('d/b.txt') // 12
  await rpc(F + 'Move', { source: 'd/b.txt', destination: 'd/c.txt' }) // 13
  await rpc(F + 'Remove', { path: 'd/c.txt' }) // 14
  await run('true') // 15
  await rpc('/process.Process/List', {}) // 16
  await run('cat a.txt') // 17
  await rpc(F + 'Stat', { path: 'a.txt' }) // 18
  await run('ls') // 19
  await call('DELETE', `/sandboxes/${id}`) // 20
  return now() - t0
}

// The same workload through airlock's own TypeScript SDK.
const airlock = process.env.AIRLOCK_TS_SDK ? new (await import(process.env.AIRLOCK_TS_SDK)).Airlock({ host: API, apiKey: KEY, timeoutMs: 120_000 }) : null
async function airlockSdkWorkload() {
  const c = airlock
  const t0 = now()
  const { id } = await c.createSandbox({}) // 1
  const exec = async (cmd, env) => {
    const r = await c.exec(id, ['/bin/bash', '-l', '-c', cmd], { env })
    if (r.exit_code !== 0) throw new Error(`${cmd}: exit ${r.exit_code}`)
  }
  await exec('echo hi') // 2
  await c.writeFile(id, 'a.txt', 'hello') // 3
  await c.readFile(id, 'a.txt') // 4
  await c.list(id, '/workspace') // 5
  await c.mkdir(id, 'd') // 6
  await c.stat(id, 'a.txt') // 7
  await exec('echo $X', { X: '1' }) // 8
  await c.getSandbox(id) // 9
  await c.setTimeout(id, 120) // 10
  await c.writeFile(id, 'd/b.txt', 'world') // 11
  await c.readFile(id, 'd/b.txt') // 12
  await c.rename(id, 'd/b.txt', 'd/c.txt') // 13
  await c.remove(id, 'd/c.txt') // 14
  await exec('true') // 15
  await c.listProcesses(id) // 16
  await exec('cat a.txt') // 17
  await c.stat(id, 'a.txt') // 18
  await exec('ls') // 19
  await c.deleteSandbox(id) // 20
  return now() - t0
}

const out = { createFirst: [], e2b: [], e2bFetch: [], native: [], airlockSDK: [] }
// The first round warms connections and caches.
for (let i = -1; i < N; i++) {
  await poolFull()
  const a = await e2bCreateFirst()
  const runs = [['e2b', e2bWorkload], ['e2bFetch', e2bFetchWorkload], ['native', nativeWorkload]]
  if (airlock) runs.push(['airlockSDK', airlockSdkWorkload])
  const first = ((i % runs.length) + runs.length) % runs.length
  const got = {}
  for (let k = 0; k < runs.length; k++) {
    const [name, f] = runs[(first + k) % runs.length]
    await poolFull()
    got[name] = await f()
  }
  if (i >= 0) {
    out.createFirst.push(a)
    for (const [name] of runs) out[name].push(got[name])
  }
}
airlock?.close()
console.log(JSON.stringify(out))
