/**
 * `npm run demo` as a new user runs it, against the shared PostgreSQL and Redis (so it installs
 * and changes nothing on the machine): it exits 0, prints under 60 lines, says up front what it
 * creates, and leaves no `cronwarden_demo` database and no Redis key of its namespace behind. With
 * --keep, its "try:" hints work against the replica it left running, and after Ctrl-C it leaves
 * exactly what it says, which its printed commands remove.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { Redis } from 'ioredis';
import pg from 'pg';
import { withoutExpiry } from '../../scripts/demo-machine.js';
import { repoRoot, run } from './support.js';

const adminUrl = process.env.CRONWARDEN_DEMO_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const redisUrl = process.env.CRONWARDEN_REDIS_URL ?? 'redis://127.0.0.1:6379';
const MAX_LINES = 60;

async function demoDatabaseExists(): Promise<boolean> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    return (await client.query("SELECT 1 FROM pg_database WHERE datname = 'cronwarden_demo'")).rowCount === 1;
  } finally {
    await client.end();
  }
}

/**
 * Every key that mentions the namespace, whatever its prefix (broader than what the demo deletes);
 * `lastingOnly`: without those that expire by themselves (job locks).
 */
async function keysMentioning(namespace: string, lastingOnly = false): Promise<string[]> {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  try {
    // A Set: SCAN may return a key twice when the table rehashes under it (other tests write).
    const keys = new Set<string>();
    for await (const batch of redis.scanStream({ match: `*${namespace}*`, count: 1000 }) as AsyncIterable<string[]>)
      for (const key of batch) keys.add(key);
    return lastingOnly ? await withoutExpiry(redis, [...keys]) : [...keys];
  } finally {
    redis.disconnect();
  }
}

function namespaceOf(output: string): string {
  const m = /namespace (demo-[a-z0-9]+)/.exec(output);
  assert.ok(m, `the demo names its namespace:\n${output}`);
  return m[1]!;
}

describe('npm run demo', { timeout: 180_000 }, () => {
  it('exits 0, prints under 60 lines, says what it creates, and removes its database and Redis keys', async () => {
    const r = await run('npm', ['run', '--silent', 'demo'], { cwd: repoRoot, timeoutMs: 120_000 });
    const output = r.stdout + r.stderr;
    assert.equal(r.code, 0, output);
    const lines = output.trimEnd().split('\n');
    assert.ok(lines.length < MAX_LINES, `${lines.length} lines:\n${output}`);
    const namespace = namespaceOf(output);
    // Up front (before any replica starts): what it touches and that it removes it.
    const head = lines.slice(0, 5).join('\n');
    assert.match(head, /nothing to install or start/);
    assert.match(head, new RegExp(`creates database cronwarden_demo and Redis keys of namespace ${namespace}`));
    assert.match(head, /removes the database and the keys at the end \(--keep/);
    assert.match(output, /no run was duplicated or lost/);
    const removed = /deleted (\d+) Redis keys of namespace/.exec(output);
    assert.ok(removed && Number(removed[1]) > 0, `it reports the keys it deleted:\n${output}`);
    assert.equal(await demoDatabaseExists(), false, 'no cronwarden_demo database left');
    assert.deepEqual(await keysMentioning(namespace), [], 'no Redis key of its namespace left');
  });

  it('--keep: the hints work against the running survivor; Ctrl-C leaves what it says, and its commands remove it', async () => {
    // What `npm run demo -- --keep` runs, started directly so SIGINT reaches the demo itself.
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/demo.ts', '--keep'], {
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const lines: string[] = [];
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
    const ready = new Promise<void>((resolve, reject) => {
      createInterface({ input: child.stdout }).on('line', (line) => {
        lines.push(line);
        if (/Ctrl-C stops it/.test(line)) resolve();
      });
      void exited.then(() =>
        reject(new Error(`the demo exited before keeping a replica:\n${lines.join('\n')}\n${stderr}`)),
      );
    });
    try {
      await ready;
      const hints = lines.filter((l) =>
        /^\[demo\]\s+(try: )?\s*(CRONWARDEN_ADMIN_TOKEN=\S+ )?node bin\/cronwarden\.js /.test(l),
      );
      assert.equal(hints.length, 2, lines.join('\n'));
      for (const hint of hints) {
        const command = hint.replace(/^\[demo\]\s+(try: )?\s*/, '');
        const r = await run('bash', ['-c', command], { cwd: repoRoot, timeoutMs: 30_000 });
        assert.equal(r.code, 0, `${command}: ${r.stdout}${r.stderr}`);
        if (command.includes(' status ')) assert.match(r.stdout, /leader\s+demo-\d\s+token \d+/);
      }
    } finally {
      child.kill('SIGINT');
    }
    assert.equal(await exited, 0, `${lines.join('\n')}\n${stderr}`);
    const output = lines.join('\n');
    assert.ok(lines.length < MAX_LINES, `${lines.length} lines:\n${output}`);
    const namespace = namespaceOf(output);
    const left = /left \(--keep\): database cronwarden_demo and (\d+) Redis keys of namespace/.exec(output);
    assert.ok(left, output);
    assert.equal(await demoDatabaseExists(), true);
    // Keys with an expiry (a job's lock, BullMQ's stalled check) may lapse between its count and ours.
    const keys = await keysMentioning(namespace, true);
    assert.equal(keys.length, Number(left[1]), `it left exactly the keys it says: ${keys.sort().join(' ')}`);
    const removal = lines
      .slice(lines.findIndex((l) => l.includes('left (--keep)')) + 1)
      .map((l) => l.replace(/^\[demo\]\s+/, ''));
    assert.equal(removal.length, 2, output);
    for (const command of removal) {
      const r = await run('bash', ['-c', command], { cwd: repoRoot, timeoutMs: 30_000 });
      assert.equal(r.code, 0, `${command}: ${r.stderr}`);
    }
    assert.equal(await demoDatabaseExists(), false, 'the printed command dropped the database');
    assert.deepEqual(await keysMentioning(namespace), [], 'the printed command deleted every key of the namespace');
  });
});
