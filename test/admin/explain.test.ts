/**
 * "Why did my job not run": GET /api/jobs/:job/occurrences and `cronwarden explain` (the real CLI
 * in a child process) against an in-process replica with a real ledger. The job `tick` fires every
 * 2 s: its instants are answered fired, the ones after now not yet due; a bad time, a reversed or
 * too long range are 400, an unknown job 404; the CLI exits 2 on bad input before any request and
 * prints one line per answer.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ADMIN_TOKEN, Cluster, firstLeader, json, type Node } from './support.js';
import { until } from './console-support.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['bin/cronwarden.js', ...args], { cwd: root, env: { ...process.env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

let db: TestDatabase;
let cluster: Cluster;
let leader: Node;

before(async () => {
  db = await createTestDatabase();
  cluster = new Cluster(db.url, db.schema);
  const a = await cluster.add('explain-a');
  await firstLeader([a.replica]);
  leader = a;
  await until(async () => {
    const r = await db.pool.query(`SELECT count(*)::int AS n FROM cw_runs WHERE job = 'tick'`);
    return r.rows[0].n >= 2;
  }, 'tick fires twice');
});
after(async () => {
  await cluster.stopAll();
  await db.drop();
});

const api = (path: string) => fetch(`${leader.url}${path}`);

it('answers each due instant of the range: fired with its run, not yet due after now', async () => {
  const now = Date.now();
  const q = new URLSearchParams({
    from: new Date(now - 60_000).toISOString(),
    to: new Date(now + 10_000).toISOString(),
  });
  const res = await api(`/api/jobs/tick/occurrences?${q}`);
  assert.equal(res.status, 200);
  const body = await json(res);
  const outcomes = (body.entries as { outcome: string }[]).map((e) => e.outcome);
  assert.ok(outcomes.includes('fired'), JSON.stringify(body.entries));
  assert.equal(outcomes.at(-1), 'not-yet-due');
  assert.ok(!outcomes.includes('unanswered'), JSON.stringify(body.entries));
  const fired = body.entries.find((e: { outcome: string }) => e.outcome === 'fired');
  assert.match(fired.text, /^fired/);
  assert.equal(body.eras[0].schedule, '*/2 * * * * *');
});

it('400 on a bad time, a reversed range or one over 31 days; 404 for a job nobody defines or accounted for', async () => {
  const bad = async (query: string, pattern: RegExp) => {
    const res = await api(`/api/jobs/tick/occurrences?${query}`);
    const body = await json(res);
    assert.equal(res.status, 400, query);
    assert.match(body.error, pattern, query);
  };
  await bad('from=yesterday', /from: must be an ISO 8601 instant/);
  await bad('from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z', /to: must not be before from/);
  await bad('from=2026-01-01T00:00:00Z&to=2026-03-01T00:00:00Z', /at most 31 days/);
  const missing = await api('/api/jobs/nope/occurrences');
  assert.equal(missing.status, 404);
  assert.match((await json(missing)).error, /unknown job "nope"/);
});

it('cronwarden explain: exit 2 on bad input, one line per answer otherwise', async () => {
  const badAt = await cli(['explain', 'tick', '--at', 'noon', '--url', leader.url]);
  assert.equal(badAt.code, 2, badAt.stderr);
  assert.match(badAt.stderr, /--at "noon" must be an ISO 8601 instant/);
  const both = await cli([
    'explain',
    'tick',
    '--at',
    '2026-01-01T00:00:00Z',
    '--from',
    '2026-01-01T00:00:00Z',
    '--url',
    leader.url,
  ]);
  assert.equal(both.code, 2, both.stderr);
  const unknown = await cli(['explain', 'nope', '--url', leader.url]);
  assert.equal(unknown.code, 2, "a 404 is the caller's mistake");
  assert.match(unknown.stderr, /unknown job "nope"/);

  const ok = await cli(['explain', 'tick', '--at', new Date(Date.now() - 3000).toISOString(), '--url', leader.url]);
  assert.equal(ok.code, 0, ok.stderr);
  const lines = ok.stdout.trim().split('\n');
  assert.match(lines[0]!, /^tick {2}\*\/2 \* \* \* \* \* \(UTC\) {2}accounted through /);
  assert.ok(
    lines.some((l) => /^> .*fired/.test(l)),
    ok.stdout,
  );
  const range = await cli([
    'explain',
    'tick',
    '--from',
    new Date(Date.now() - 30_000).toISOString(),
    '--url',
    leader.url,
  ]);
  assert.equal(range.code, 0, range.stderr);
  assert.match(range.stdout, /fired/);
});

it('the leader counts occurrences by job, outcome and reason; a pause shows as skipped [paused] with who and why', async () => {
  const metric = async (labels: string) => {
    const text = await (await api('/metrics')).text();
    const line = text.split('\n').find((l) => l.startsWith(`cronwarden_occurrences_total{${labels},`));
    return line === undefined ? 0 : Number(line.split(' ').at(-1));
  };
  assert.ok((await metric('job="tick",outcome="fired",reason="schedule"')) >= 2);
  const pausedAt = Date.now();
  const res = await fetch(`${leader.url}/api/jobs/tick/pause`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ reason: 'disk full' }),
  });
  assert.equal(res.status, 200);
  await until(
    async () => (await metric('job="tick",outcome="skipped",reason="paused"')) >= 1,
    'a skipped slot is counted',
  );
  const out = await cli(['explain', 'tick', '--from', new Date(pausedAt).toISOString(), '--url', leader.url]);
  assert.equal(out.code, 0, out.stderr);
  assert.match(out.stdout, /skipped( \(\d+ instants\))? \[paused\]: job is paused by admin.*: disk full/);
});

it('a hole older than retention is not a violation: its run may have been deleted; a newer one is unanswered', async () => {
  const DAY = 86_400_000;
  const now = Date.now();
  const firstEra = await db.pool.query(`SELECT min(from_at) AS f FROM cw_schedule_eras WHERE job = 'tick'`);
  // An earlier era of the same schedule, as if the job had been fired for weeks and its old runs pruned.
  await db.pool.query(
    `INSERT INTO cw_schedule_eras (job, expression, timezone, dst, from_at, to_at, leader_token, leader_id)
     VALUES ('tick', '*/2 * * * * *', 'UTC', 'first/shift', $1, $2, 1, 'test')`,
    [new Date(now - 20 * DAY), firstEra.rows[0].f],
  );
  const ask = async (fromDays: number, toDays: number) => {
    const q = new URLSearchParams({
      from: new Date(now - fromDays * DAY).toISOString(),
      to: new Date(now - toDays * DAY).toISOString(),
    });
    const body = await json(await api(`/api/jobs/tick/occurrences?${q}`));
    return (body.entries as { outcome: string; count: number; notAccounted?: { why: string } }[]).map((e) => [
      e.outcome,
      e.notAccounted?.why,
    ]);
  };
  // The replicas keep 14 days (the default).
  assert.deepEqual(await ask(16, 15.99), [['not-accounted', 'retention']]);
  assert.deepEqual(await ask(13, 12.99), [['unanswered', undefined]]);
});
