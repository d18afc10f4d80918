// Benchmark of the E2B compatibility layer (run by `airlock-bench serve`):
// create -> first command through the E2B SDK (warm pool), and one 20-step
// workload timed end to end, through the E2B SDK and through airlock's
// native /v1 API with plain fetch from the same process. Prints one JSON
// object of millisecond samples.
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
// round, the E2B and native workloads take turns at going first.
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

const out = { createFirst: [], e2b: [], native: [] }
// The first round warms connections and caches.
for (let i = -1; i < N; i++) {
  await poolFull()
  const a = await e2bCreateFirst()
  let b, c
  await poolFull()
  if (i % 2 === 0) {
    b = await e2bWorkload()
    await poolFull()
    c = await nativeWorkload()
  } else {
    c = await nativeWorkload()
    await poolFull()
    b = await e2bWorkload()
  }
  if (i >= 0) {
    out.createFirst.push(a)
    out.e2b.push(b)
    out.native.push(c)
  }
}
console.log(JSON.stringify(out))
