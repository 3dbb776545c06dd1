/**
 * `cronwarden runs`, `run ID` and `retry ID` (the real CLI in a child process) against in-process
 * replicas: a failed run is listed and shown with its stack, retried through a follower (which
 * names the leader; the CLI follows it), and a second retry of the now completed run is refused.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Cluster, ADMIN_TOKEN, firstLeader, json, type Node } from './support.js';
import { consoleJobs, createUserTables, effectRows, setFailing, until } from './console-support.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

function cli(args: string[], token?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['bin/cronwarden.js', ...args], {
      cwd: root,
      env: { ...process.env, CRONWARDEN_ADMIN_TOKEN: token ?? '' },
    });
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
let follower: Node;
let runId: string;

before(async () => {
  db = await createTestDatabase();
  await createUserTables(db);
  cluster = new Cluster(db.url, db.schema, undefined, consoleJobs);
  const a = await cluster.add('rcli-a');
  const b = await cluster.add('rcli-b');
  const l = await firstLeader([a.replica, b.replica]);
  leader = l === a.replica ? a : b;
  follower = l === a.replica ? b : a;
  await setFailing(db, true);
  const res = await fetch(`${leader.url}/api/jobs/flaky/trigger`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  runId = (await json(res)).runId as string;
  await until(async () => {
    const r = await db.pool.query<{ state: string }>('SELECT state FROM cw_runs WHERE id = $1', [runId]);
    return r.rows[0]?.state === 'failed';
  }, 'the run fails');
});
after(async () => {
  await cluster.stopAll();
  await db.drop();
});

it('cronwarden runs lists the failed run; --json gives the page with its cursor', { timeout: 60_000 }, async () => {
  const text = await cli(['runs', '--url', follower.url, '--job', 'flaky', '--state', 'failed']);
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stdout, /^RUN\s+JOB\s+SCHEDULED/);
  assert.match(text.stdout, new RegExp(`^${runId}\\s+flaky\\s+\\S+\\s+manual\\s+failed`, 'm'));
  const raw = await cli(['runs', '--url', follower.url, '--job', 'flaky', '--json']);
  const page = JSON.parse(raw.stdout) as { runs: { id: string }[]; nextCursor: string | null };
  assert.deepEqual(
    page.runs.map((r) => r.id),
    [runId],
  );
  assert.equal(page.nextCursor, null);
  const manual = await cli(['runs', '--url', follower.url, '--trigger', 'manual']);
  assert.match(manual.stdout, new RegExp(`^${runId}\\s+flaky`, 'm'));
  const once = await cli(['runs', '--url', follower.url, '--trigger', 'once']);
  assert.equal(once.code, 0, once.stderr);
  assert.doesNotMatch(once.stdout, new RegExp(`^${runId}\\s`, 'm'), 'only one-off runs');
  const bad = await cli(['runs', '--url', follower.url, '--state', 'exploded']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /state: must be one of/);
});

it('cronwarden run ID shows every attempt and the stack', { timeout: 60_000 }, async () => {
  const out = await cli(['run', runId, '--url', follower.url]);
  assert.equal(out.code, 0, out.stderr);
  assert.match(out.stdout, new RegExp(`^run\\s+${runId}\\s+flaky\\s+failed`, 'm'));
  assert.match(out.stdout, /key\s+flaky@\d{4}-/);
  assert.match(out.stdout, /stack of attempt 1:\n.*report service refused[\s\S]*reportServiceRefused/);
  const json = JSON.parse((await cli(['run', runId, '--url', follower.url, '--json'])).stdout) as {
    attempts: unknown[];
  };
  assert.equal(json.attempts.length, 1);
  assert.equal((await cli(['run', 'x1', '--url', follower.url])).code, 2);
});

it(
  'cronwarden retry ID via a follower retries on the leader; a completed run is refused',
  { timeout: 60_000 },
  async () => {
    const noToken = await cli(['retry', runId, '--url', follower.url]);
    assert.equal(noToken.code, 2);
    assert.match(noToken.stderr, /CRONWARDEN_ADMIN_TOKEN/);
    await setFailing(db, false);
    const ok = await cli(['retry', runId, '--url', follower.url], ADMIN_TOKEN);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(
      ok.stdout,
      new RegExp(`run ${runId} \\(flaky\\) retried from failed \\(leader ${leader.replica.replicaId}`),
    );
    await until(async () => (await effectRows(db, runId)) === 1, 'the retried run writes its effect');
    await until(async () => {
      const r = await db.pool.query<{ state: string }>('SELECT state FROM cw_runs WHERE id = $1', [runId]);
      return r.rows[0]?.state === 'completed';
    }, 'the retried run completes');
    const again = await cli(['retry', runId, '--url', leader.url], ADMIN_TOKEN);
    assert.equal(again.code, 2, 'not retryable: trying again cannot change it');
    assert.match(again.stderr, /is completed: it completed, so retrying it would repeat its effect/);
    assert.equal(await effectRows(db, runId), 1);
  },
);

it(
  'prints stored text with its control characters escaped: an error cannot drive the terminal',
  { timeout: 60_000 },
  async () => {
    // eslint-disable-next-line no-control-regex
    const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;
    const evil = '\u001b]0;pwned\u0007\u001b[2K\rall good\u009b31m';
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state, finished_at, error)
     VALUES ('flaky', now() - interval '1 day', 'manual', 1, $1, 'failed', now(), $2) RETURNING id::text`,
      [`leader${evil}`, evil],
    );
    const id = rows[0]!.id;
    await db.pool.query(
      `INSERT INTO cw_run_attempts (run_id, attempt, token, worker, state, finished_at, error, error_stack)
     VALUES ($1, 1, 1, $2, 'failed', now(), $3, $4)`,
      [id, `w${evil}`, evil, `Error: ${evil}\n    at handler (job.ts:1:1)`],
    );
    const outputs = [
      await cli(['run', id, '--url', follower.url]),
      await cli(['run', id, '--url', follower.url, '--json']),
      await cli(['runs', '--url', follower.url, '--job', 'flaky', '--state', 'failed']),
    ];
    for (const out of outputs) {
      assert.equal(out.code, 0, out.stderr);
      assert.doesNotMatch(out.stdout, CONTROL, 'no control character reaches the terminal');
    }
    assert.match(outputs[0]!.stdout, /error {5}\\u001b\]0;pwned\\u0007\\u001b\[2K\\u000dall good\\u009b31m/);
    assert.match(
      outputs[0]!.stdout,
      /stack of attempt 1:\nError: \\u001b.*\n {4}at handler/,
      'the stack keeps its lines',
    );
    const json = JSON.parse(outputs[1]!.stdout) as { error: string };
    assert.equal(json.error, evil, '--json stays JSON with the text intact');
  },
);
