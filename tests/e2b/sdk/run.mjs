// Drives airlock serve with the official E2B SDK, unchanged: the test sets
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY. Each step prints one JSON
// line; the first failed check ends the program with a non-zero status.
import http from 'node:http'
import { Sandbox, CommandExitError, AuthenticationError, NotFoundError } from 'e2b'

const RUN = process.env.RUN_ID
const API = new URL(process.env.E2B_API_URL)

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what)
}
function step(name, extra = {}) {
  console.log(JSON.stringify({ step: name, ...extra }))
}
// until waits for cond, polling each 20 ms for at most 15 s.
async function until(cond, what) {
  for (let i = 0; i < 750; i++) {
    if (await cond()) return
    await new Promise((r) => setTimeout(r, 20))
  }
  throw new Error('timed out waiting for ' + what)
}
// get sends a GET to the daemon with the given headers (Host included).
function get(path, headers) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: API.hostname, port: API.port, path, method: 'GET', headers }, (res) => {
      let body = ''
      res.on('data', (d) => (body += d))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

const sbx = await Sandbox.create({ metadata: { suite: 'e2b', run: RUN }, envs: { GREETING: 'hello' }, timeoutMs: 120_000 })
step('create', { id: sbx.sandboxId })

// Foreground command: env from create and from the call, cwd, both streams.
let so = '', se = ''
const r = await sbx.commands.run('echo $GREETING $EXTRA; pwd; echo err >&2', {
  envs: { EXTRA: 'x' }, cwd: '/tmp', onStdout: (d) => (so += d), onStderr: (d) => (se += d),
})
check(r.exitCode === 0, 'exit 0')
check(r.stdout === 'hello x\n/tmp\n', 'stdout ' + JSON.stringify(r.stdout))
check(r.stderr === 'err\n', 'stderr ' + JSON.stringify(r.stderr))
check(so === r.stdout && se === r.stderr, 'callbacks saw the output')
step('run')

// A non-zero exit raises CommandExitError.
try {
  await sbx.commands.run('echo bad >&2; exit 3')
  check(false, 'exit 3 raised')
} catch (e) {
  check(e instanceof CommandExitError, 'CommandExitError, got ' + e)
  check(e.exitCode === 3 && e.stderr === 'bad\n', 'exitCode 3 and stderr')
  check(e.message === 'exit status 3', 'CommandExitError message: ' + JSON.stringify(e.message))
}
// timeoutMs is the command's: it is killed when it expires (the SDK
// raises), in the foreground and in the background alike.
const t0 = Date.now()
try {
  await sbx.commands.run('sleep 30; touch /tmp/fg-survived', { timeoutMs: 1000 })
  check(false, 'a command past its timeoutMs raises')
} catch (e) {
  check(!(e instanceof CommandExitError), 'timeout: not an exit error, got ' + e)
}
await sbx.commands.run('sleep 30; touch /tmp/bg-survived', { background: true, timeoutMs: 1000 })
await until(async () => !(await sbx.commands.list()).some((p) => p.cmd === '/bin/bash' && p.args.join(' ').includes('survived')), 'timed-out commands gone from list')
check(Date.now() - t0 < 15000, 'timed-out commands ended within their timeouts')
// A command that leaves a child holding its output returns when it ends,
// as envd's do, not when the child does.
const t1 = Date.now()
const left = await sbx.commands.run('sleep 600 & echo parent done')
check(left.exitCode === 0 && left.stdout === 'parent done\n', 'a command leaving a child: ' + JSON.stringify(left))
check(Date.now() - t1 < 10000, 'a command leaving a child returned in ' + (Date.now() - t1) + ' ms')
// Killing a command that has ended answers false, as for an unknown one.
const quick = await sbx.commands.run('true', { background: true })
await quick.wait()
check((await sbx.commands.kill(quick.pid)) === false, 'kill of an ended command is false')
step('exit-error')

// Background command, connect, list, kill.
let bgOut = ''
const bg = await sbx.commands.run('echo started; exec sleep 600', { background: true, onStdout: (d) => (bgOut += d) })
await until(() => bgOut.includes('started'), 'background output')
const procs = await sbx.commands.list()
check(procs.some((p) => p.pid === bg.pid), 'list has the background command')
let seen = ''
const conn = await sbx.commands.connect(bg.pid, { onStdout: (d) => (seen += d) })
await until(() => seen.includes('started'), 'connect replays output')
check(await sbx.commands.kill(bg.pid), 'kill')
try {
  await conn.wait()
  check(false, 'a killed command raises')
} catch (e) {
  check(e instanceof CommandExitError, 'killed: CommandExitError, got ' + e)
}
await until(async () => !(await sbx.commands.list()).some((p) => p.pid === bg.pid), 'killed command gone from list')
step('background')

// sendStdin
const cat = await sbx.commands.run('head -n1', { background: true, stdin: true })
await sbx.commands.sendStdin(cat.pid, 'piped line\n')
const cr = await cat.wait()
check(cr.stdout === 'piped line\n', 'stdin reached the command: ' + JSON.stringify(cr.stdout))
step('stdin')

// A terminal: input, resize, output, kill.
let ptyOut = ''
const dec = new TextDecoder()
const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (ptyOut += dec.decode(d)) })
await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; echo pty-$((6*7))\n'))
await until(() => ptyOut.includes('pty-42') && ptyOut.includes('30 100'), 'terminal output: ' + JSON.stringify(ptyOut.slice(-200)))
check((await sbx.commands.list()).some((p) => p.pid === term.pid), 'the terminal is listed')
check(await sbx.pty.kill(term.pid), 'kill the terminal')
try {
  await term.wait()
  check(false, 'a killed terminal raises')
} catch (e) {
  check(e instanceof CommandExitError, 'killed terminal: CommandExitError, got ' + e)
}
step('pty')

// Files.
await sbx.files.write('dir1/hello.txt', 'hello file')
check((await sbx.files.read('dir1/hello.txt')) === 'hello file', 'read text')
const bytes = await sbx.files.read('/workspace/dir1/hello.txt', { format: 'bytes' })
check(bytes instanceof Uint8Array && bytes.length === 10 && bytes[0] === 104, 'read bytes')
await sbx.files.write('/workspace/bin.dat', new Uint8Array([0, 1, 2, 255]).buffer)
const bin = await sbx.files.read('bin.dat', { format: 'bytes' })
check(bin.length === 4 && bin[3] === 255, 'binary round trip')
// A compressed upload (gzip: true) lands decompressed; a /proc file, whose
// size says 0, reads whole.
await sbx.files.write('/workspace/gz.txt', 'compressed on the way '.repeat(100), { gzip: true })
check((await sbx.files.read('gz.txt')) === 'compressed on the way '.repeat(100), 'gzip upload round trip')
check((await sbx.files.read('/proc/self/status')).includes('Name:'), '/proc file read whole')
// ~ is the home directory, as in envd: here /workspace.
await sbx.files.write('~/home.txt', 'at home')
check((await sbx.files.read('/workspace/home.txt')) === 'at home' && (await sbx.files.exists('~/home.txt')), '~ is /workspace')
const entries = await sbx.files.list('dir1')
check(entries.some((e) => e.name === 'hello.txt' && e.type === 'file' && e.path === '/workspace/dir1/hello.txt'), 'list: ' + JSON.stringify(entries))
check((await sbx.files.makeDir('/workspace/newdir')) === true, 'makeDir')
check((await sbx.files.makeDir('/workspace/newdir')) === false, 'makeDir of an existing dir')
await sbx.files.rename('dir1/hello.txt', 'dir1/renamed.txt')
check(await sbx.files.exists('dir1/renamed.txt'), 'renamed exists')
check(!(await sbx.files.exists('dir1/hello.txt')), 'old name gone')
const info = await sbx.files.getInfo('dir1/renamed.txt')
check(info.size === 10 && info.type === 'file' && info.name === 'renamed.txt', 'getInfo ' + JSON.stringify(info))
check((await sbx.files.getInfo('newdir')).type === 'dir', 'getInfo dir')
// Several files in one write: each lands at its own path (the SDK names
// each part by it), not every one in /workspace under its last element.
const many = await sbx.files.write([
  { path: 'multi/a.txt', data: 'A' },
  { path: '/tmp/multi/b.txt', data: 'B' },
])
check(many.length === 2 && many[0].path === '/workspace/multi/a.txt' && many[1].path === '/tmp/multi/b.txt', 'multi-file write: ' + JSON.stringify(many))
check((await sbx.files.read('multi/a.txt')) === 'A' && (await sbx.files.read('/tmp/multi/b.txt')) === 'B', 'multi-file write read back')
check(!(await sbx.files.exists('/workspace/a.txt')) && !(await sbx.files.exists('/workspace/b.txt')), 'multi-file write: nothing under the last element alone')
await sbx.files.write('todelete.txt', 'x')
await sbx.files.remove('todelete.txt')
check(!(await sbx.files.exists('todelete.txt')), 'removed')
try {
  await sbx.files.read('no/such/file')
  check(false, 'reading a missing file raises')
} catch (e) {
  check(e instanceof NotFoundError, 'missing file: NotFoundError, got ' + e)
}
const events = []
const watcher = await sbx.files.watchDir('/workspace/newdir', (ev) => events.push(ev))
await sbx.files.write('/workspace/newdir/w.txt', 'w')
await until(() => events.some((e) => e.name === 'w.txt' && e.type === 'create'), 'watch create event')
await sbx.files.remove('/workspace/newdir/w.txt')
await until(() => events.some((e) => e.name === 'w.txt' && e.type === 'remove'), 'watch remove event')
await watcher.stop()
step('files')

// Sandbox.list with metadata.
const mine = await Sandbox.list({ query: { metadata: { run: RUN } } }).nextItems()
check(mine.length === 1 && mine[0].sandboxId === sbx.sandboxId && mine[0].metadata.suite === 'e2b', 'list by metadata ' + JSON.stringify(mine))
const none = await Sandbox.list({ query: { metadata: { run: RUN + '-other' } } }).nextItems()
check(none.length === 0, 'list by other metadata is empty')
step('list')

// Pause, then connect resumes.
await sbx.pause()
check((await sbx.getInfo()).state === 'paused', 'paused')
check((await sbx.isRunning()) === false, 'isRunning false while paused')
const again = await Sandbox.connect(sbx.sandboxId)
check((await again.getInfo()).state === 'running', 'running after connect')
check((await again.commands.run('echo back')).stdout === 'back\n', 'command after resume')
step('pause-connect')

// setTimeout and getInfo.
const before = await sbx.getInfo()
await sbx.setTimeout(300_000)
const after = await sbx.getInfo()
check(after.endAt.getTime() > before.endAt.getTime(), 'setTimeout moved endAt')
check(after.templateId === 'base' && after.metadata.run === RUN, 'getInfo ' + JSON.stringify(after))
step('timeout-info')

// getHost(port) and the header form reach a server inside the sandbox.
await sbx.files.write('site/index.html', 'served from the sandbox')
let srvOut = ''
await sbx.commands.run('cd /workspace/site && exec python3 -u -m http.server 8000 --bind 127.0.0.1', {
  background: true, onStdout: (d) => (srvOut += d), onStderr: (d) => (srvOut += d),
})
await until(() => srvOut.includes('Serving HTTP'), 'the server inside to listen')
const host = sbx.getHost(8000)
const token = sbx.envdAccessToken
let res = await get('/index.html', { Host: host, 'X-Access-Token': token })
check(res.status === 200 && res.body === 'served from the sandbox', 'getHost fetch: ' + res.status + ' ' + res.body)
res = await get('/index.html', { Host: host })
check(res.status === 401, 'getHost without a token: ' + res.status)
res = await get('/index.html', { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000', 'X-Access-Token': token })
check(res.status === 200 && res.body === 'served from the sandbox', 'header form fetch: ' + res.status)
step('port', { host })

// A second sandbox is left running: the test checks its files from /v1.
const keep = await Sandbox.create({ metadata: { run: RUN, role: 'keep' } })
await keep.files.write('from-sdk.txt', 'written by the e2b sdk\n')
await keep.commands.run('echo made by a command > /workspace/from-cmd.txt')
step('keep', { id: keep.sandboxId })

// kill, isRunning.
check(await sbx.isRunning(), 'isRunning before kill')
await sbx.kill()
check(!(await sbx.isRunning()), 'isRunning after kill')
step('kill', { id: sbx.sandboxId })

// Errors the SDK maps to its own types.
try {
  await Sandbox.create({ apiKey: 'al_wrong_key' })
  check(false, 'a wrong key raises')
} catch (e) {
  check(e instanceof AuthenticationError, 'wrong key: AuthenticationError, got ' + e)
}
try {
  await Sandbox.connect('sb-00000000deadbeef')
  check(false, 'an unknown sandbox raises')
} catch (e) {
  check(e instanceof NotFoundError, 'unknown sandbox: NotFoundError, got ' + e)
}
step('errors')
step('done', { killed: sbx.sandboxId, keep: keep.sandboxId })
