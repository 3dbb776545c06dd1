/**
 * The console's JSON API on in-process replicas (memory lease, real PostgreSQL ledger, Redis and
 * BullMQ): runs paged newest first by a keyset cursor that stays stable while runs are inserted,
 * filters and search, a failed run's detail with its stack, retry of a failed run (one new
 * attempt, one effect), refused for a completed run and fenced for a stale leader, the per-job
 * overview numbers, the per-minute history and the failover timeline's handover.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster, ADMIN_TOKEN, firstLeader, json, type Node } from './support.js';
import { consoleJobs, createUserTables, effectRows, insertHistory, setFailing, until } from './console-support.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { listElections } from '../../src/ledger/admin-reads.js';
import { jobStats } from '../../src/ledger/job-stats.js';
import { tablesIn } from '../../src/db/tables.js';

let db: TestDatabase;
let cluster: Cluster;
let leader: Node;
let follower: Node;

before(async () => {
  db = await createTestDatabase();
  await createUserTables(db);
  cluster = new Cluster(db.url, db.schema, undefined, consoleJobs);
  const a = await cluster.add('con-a');
  const b = await cluster.add('con-b');
  const l = await firstLeader([a.replica, b.replica]);
  leader = l === a.replica ? a : b;
  follower = l === a.replica ? b : a;
});
after(async () => {
  await cluster.stopAll();
  await db.drop();
});

const post = (node: Node, path: string, token: string | null = ADMIN_TOKEN) =>
  fetch(`${node.url}${path}`, {
    method: 'POST',
    headers: token === null ? {} : { authorization: `Bearer ${token}` },
  });

async function runState(id: string): Promise<string> {
  const r = await db.pool.query<{ state: string }>('SELECT state FROM cw_runs WHERE id = $1', [id]);
  return r.rows[0]!.state;
}

/** Triggers `flaky` through the API and waits until its run settles; returns the run id. */
async function settledFlakyRun(): Promise<string> {
  const body = await json(await post(leader, '/api/jobs/flaky/trigger'));
  const id = body.runId as string;
  await until(async () => ['completed', 'failed'].includes(await runState(id)), `run ${id} settles`);
  return id;
}

describe('runs paging and filters', () => {
  it('pages the whole ledger newest first by scheduled time, stable while runs are inserted', async () => {
    const newest = new Date(Date.UTC(2025, 5, 1, 12, 0, 0));
    await insertHistory(db, 'paging', 300, newest);
    const seen: { id: string; scheduledAt: string }[] = [];
    let cursor: string | null = null;
    let page = 0;
    do {
      const body = (await json(
        await fetch(`${follower.url}/api/runs?job=paging&limit=25${cursor ? `&cursor=${cursor}` : ''}`),
      )) as { runs: { id: string; scheduledAt: string }[]; nextCursor: string | null };
      seen.push(...body.runs);
      cursor = body.nextCursor;
      // Between pages: a newer fire, an older catch-up, and one on an instant already seen.
      const inserted = newest.getTime() + ++page * 60_000;
      await db.pool.query(
        `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state) VALUES
           ('paging', $1, 'schedule', 2, 'late', 'completed'), ('paging', $2, 'catchup', 2, 'late', 'completed'),
           ('paging', $3, 'manual', 2, 'late', 'completed')`,
        [
          new Date(inserted),
          new Date(newest.getTime() - 400 * 60_000 - page * 1000),
          new Date(seen.at(-1)!.scheduledAt),
        ],
      );
    } while (cursor !== null && page < 100);
    const ids = seen.map((r) => r.id);
    assert.equal(new Set(ids).size, ids.length, 'no run repeats across pages');
    const original = await db.pool.query<{ id: string }>(
      "SELECT id::text FROM cw_runs WHERE job = 'paging' AND leader_id = 'history'",
    );
    const missing = original.rows.filter((r) => !ids.includes(r.id));
    assert.deepEqual(missing, [], 'every run that existed when paging began is on some page');
    for (let i = 1; i < seen.length; i++) {
      const [a, b] = [seen[i - 1]!, seen[i]!];
      const order = Date.parse(a.scheduledAt) - Date.parse(b.scheduledAt) || Number(BigInt(a.id) - BigInt(b.id));
      assert.ok(order > 0, `newest first: ${a.id}@${a.scheduledAt} before ${b.id}@${b.scheduledAt}`);
    }
  });

  it('filters by state, trigger and time range, and finds a run by id or idempotency key', async () => {
    const from = '2025-06-01T11:00:00.000Z';
    const to = '2025-06-01T11:10:00.000Z';
    const range = await json(await fetch(`${leader.url}/api/runs?job=paging&trigger=schedule&from=${from}&to=${to}`));
    assert.equal(range.runs.length, 10, 'ten minutes of one run a minute, the end excluded');
    assert.ok(range.runs.every((r: { scheduledAt: string }) => r.scheduledAt >= from && r.scheduledAt < to));
    const manual = await json(await fetch(`${leader.url}/api/runs?job=paging&trigger=manual&limit=500`));
    assert.ok(manual.runs.length > 0 && manual.runs.every((r: { trigger: string }) => r.trigger === 'manual'));
    const one = range.runs[3];
    const byId = await json(await fetch(`${leader.url}/api/runs?q=${one.id}`));
    assert.deepEqual(
      byId.runs.map((r: { id: string }) => r.id),
      [one.id],
    );
    const byKey = await json(
      await fetch(`${leader.url}/api/runs?q=${encodeURIComponent(`paging@${one.scheduledAt}`)}`),
    );
    assert.ok(byKey.runs.some((r: { id: string }) => r.id === one.id));
    assert.ok(byKey.runs.every((r: { job: string; scheduledAt: string }) => r.scheduledAt === one.scheduledAt));
    const none = await json(await fetch(`${leader.url}/api/runs?job=paging&state=failed`));
    assert.deepEqual(none, { runs: [], nextCursor: null });
    for (const [query, field] of [
      ['cursor=abc', 'cursor'],
      ['q=not-a-key', 'q'],
      ['from=yesterday', 'from'],
      ['trigger=cron', 'trigger'],
    ]) {
      const res = await fetch(`${leader.url}/api/runs?${query}`);
      assert.equal(res.status, 400, query);
      assert.match((await json(res)).error, new RegExp(`^${field}: `));
    }
  });
});

describe('a failed run: detail, retry, refusals', () => {
  let failed: string;

  it('shows every attempt of a failed run with its execution token, worker, duration and stack', async () => {
    await setFailing(db, true);
    failed = await settledFlakyRun();
    assert.equal(await runState(failed), 'failed');
    const run = await json(await fetch(`${follower.url}/api/runs/${failed}`));
    assert.equal(run.state, 'failed');
    assert.equal(run.trigger, 'manual');
    assert.equal(run.leaderId, leader.replica.replicaId);
    assert.match(run.leaderToken, /^[1-9][0-9]*$/);
    assert.equal(run.idempotencyKey, `flaky@${run.scheduledAt}`);
    assert.equal(run.attempts.length, 1);
    const a = run.attempts[0];
    assert.equal(a.state, 'failed');
    assert.match(a.token, /^[1-9][0-9]*$/);
    assert.ok(['con-a', 'con-b'].includes(a.worker));
    assert.ok(a.durationMs >= 0);
    assert.match(a.error, /report service refused/);
    assert.match(a.errorStack, /reportServiceRefused/);
    assert.ok(run.latenessMs >= 0);
    assert.equal((await fetch(`${leader.url}/api/runs/999999999`)).status, 404);
  });

  it('retry needs the token, and a follower names the leader', async () => {
    assert.equal((await post(leader, `/api/runs/${failed}/retry`, null)).status, 401);
    const res = await post(follower, `/api/runs/${failed}/retry`);
    assert.equal(res.status, 409);
    const body = await json(res);
    assert.equal(body.code, 'not_leader');
    assert.equal(body.leaderAdminUrl, leader.url);
    assert.equal(await runState(failed), 'failed', 'a refused retry changes nothing');
  });

  it('retrying the failed run makes a new attempt of the same run that completes with one effect', async () => {
    await setFailing(db, false);
    const res = await post(leader, `/api/runs/${failed}/retry`);
    assert.equal(res.status, 200);
    const body = await json(res);
    assert.equal(body.previousState, 'failed');
    await until(async () => (await runState(failed)) === 'completed', 'the retried run completes');
    const run = await json(await fetch(`${leader.url}/api/runs/${failed}`));
    assert.equal(run.attempts.length, 2);
    assert.equal(run.completedAttempt, 2);
    assert.ok(BigInt(run.attempts[1].token) > BigInt(run.attempts[0].token), 'a new execution token');
    assert.equal(await effectRows(db, failed), 1);
    const effect = await db.pool.query('SELECT idempotency_key FROM public.console_effects WHERE run_id = $1', [
      failed,
    ]);
    assert.equal(effect.rows[0].idempotency_key, run.idempotencyKey, 'the same idempotency key');
  });

  it('retry of a completed run is refused with 409 and changes nothing', async () => {
    const res = await post(leader, `/api/runs/${failed}/retry`);
    assert.equal(res.status, 409);
    const body = await json(res);
    assert.equal(body.code, 'not_retryable');
    assert.equal(body.state, 'completed');
    assert.match(body.error, /completed/);
    assert.equal(await runState(failed), 'completed');
    assert.equal(await effectRows(db, failed), 1);
    assert.equal((await post(leader, '/api/runs/999999999/retry')).status, 404);
  });
});

describe('overview and history', () => {
  it('GET /api/jobs gives the schedule in words, the next three fires in the job zone, and 24 h numbers', async () => {
    const body = await json(await fetch(`${follower.url}/api/jobs`));
    const flaky = body.jobs.find((j: { name: string }) => j.name === 'flaky');
    assert.equal(flaky.description, 'at 00:00 every year on January 1');
    assert.equal(flaky.nextFires.length, 3);
    assert.match(flaky.nextFires[0].local, /^\d{4}-01-01 00:00:00$/);
    assert.equal(flaky.nextFires[0].offset, '+01:00');
    // Runs, by how they settled: the failed run was retried and completed, so it counts as a success.
    assert.equal(flaky.stats.failed, 0);
    assert.equal(flaky.stats.completed, 1);
    assert.equal(flaky.stats.successRate, 1);
    assert.ok(flaky.stats.durationP95Ms >= 0);
    assert.ok(Date.parse(flaky.stats.lastSuccessAt) > Date.now() - 60_000);
    const beat = body.jobs.find((j: { name: string }) => j.name === 'beat');
    assert.equal(beat.description, 'every 2 seconds');
  });

  it('GET /api/history counts fires and failures per minute, per job and for the cluster', async () => {
    // beat fires every 2 s: on a fast machine the tests above end before its first slot.
    await until(async () => {
      const r = await db.pool.query(`SELECT 1 FROM cw_runs WHERE job = 'beat' LIMIT 1`);
      return r.rowCount === 1;
    }, 'beat has fired once');
    const h = await json(await fetch(`${leader.url}/api/history?minutes=30`));
    assert.equal(h.minutes, 30);
    assert.equal(h.cluster.fires.length, 30);
    const sum = (a: number[]) => a.reduce((s, v) => s + v, 0);
    assert.equal(sum(h.jobs.flaky.fires), 1);
    assert.equal(sum(h.jobs.flaky.failures), 0, 'the failed run completed since');
    assert.ok(sum(h.jobs.beat.fires) > 0);
    assert.equal(sum(h.cluster.fires), sum(Object.values(h.jobs).map((s) => sum((s as { fires: number[] }).fires))));
    assert.equal((await fetch(`${leader.url}/api/history?minutes=2`)).status, 400);
  });

  it("a backfill's runs do not count as lateness: its slots are old on purpose", async () => {
    // A backfill started just now of slots 7-9 minutes ago, and one run of the same job 50 ms late.
    await db.pool.query(
      `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state, created_at, started_at, finished_at)
       SELECT 'backfilled', date_trunc('minute', now()) - g * interval '1 minute', 'backfill', 1, 'l', 'completed', now(), now(), now()
       FROM generate_series(7, 9) g
       UNION ALL
       SELECT 'backfilled', date_trunc('minute', now()) - interval '3 minutes', 'schedule', 1, 'l', 'completed',
              date_trunc('minute', now()) - interval '3 minutes', date_trunc('minute', now()) - interval '3 minutes' + interval '50 milliseconds', now()`,
    );
    const h = await json(await fetch(`${leader.url}/api/history?minutes=15&job=backfilled`));
    const late = (h.jobs.backfilled.latenessP95Ms as (number | null)[]).filter((v) => v !== null);
    assert.deepEqual(late, [50], 'only the scheduled run is late, by 50 ms');
    assert.equal(
      (h.jobs.backfilled.fires as number[]).reduce((a, b) => a + b, 0),
      4,
      'the backfilled slots still count as fires',
    );
    const stats = await jobStats(db.pool, tablesIn(db.schema), ['backfilled']);
    assert.equal(stats.get('backfilled')!.latenessP95Ms, 50);
  });
});

describe('failover', () => {
  it('a resign shows in the timeline as a handover measured from the release', async () => {
    const old = leader;
    assert.equal((await post(old, '/api/resign')).status, 200);
    const next = await firstLeader([follower.replica]);
    leader = follower;
    follower = old;
    assert.equal(next, leader.replica);
    await until(async () => {
      const { elections } = await json(await fetch(`${leader.url}/api/elections?limit=1`));
      return elections[0]?.leader === leader.replica.replicaId;
    }, 'the new election is recorded');
    const { elections } = await json(await fetch(`${leader.url}/api/elections?limit=2`));
    const [now, prev] = elections;
    assert.equal(now.previousLeader, old.replica.replicaId);
    assert.equal(now.handoverFrom, 'release');
    assert.ok(prev.releasedAt !== null && prev.lastRenewedAt !== null, JSON.stringify(prev));
    assert.ok(now.handoverMs >= 0 && now.handoverMs < 5000, `handover ${now.handoverMs} ms`);
  });

  it("the gap after a kill -9 is measured from the ledger's fires: stand-ins that fired every slot 0.5 s late make it 1.5 s", async () => {
    // A job due every second; the leader 'old' fired up to 10:00:05 and was killed; followers stood
    // in for 10:00:06-10:00:09, each 0.5 s late; 'new' was elected 9.6 s after old's election and
    // fired from 10:00:10. A manual run in between is no slot that was due.
    const t0 = Date.parse('2026-03-01T10:00:00Z');
    const at = (s: number) => new Date(t0 + s * 1000);
    await db.pool.query(
      `INSERT INTO cw_elections (lease_name, leader, token, backend, elected_at, renewed_at)
       VALUES ('gap-test', 'old', 10, 'memory', $1, $2), ('gap-test', 'new', 11, 'memory', $3, NULL)`,
      [at(0), at(5), at(9.6)],
    );
    const fire = (slot: number, committed: number, leader: string, token: number, trigger: string) =>
      db.pool.query(
        `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state, created_at)
         VALUES ('gapjob', $1, $2, $3, $4, 'completed', $5)`,
        [at(slot), trigger, token, leader, at(committed)],
      );
    for (let s = 1; s <= 5; s++) await fire(s, s + 0.05, 'old', 10, 'schedule');
    await fire(5.3, 5.3, 'someone', 10, 'manual');
    for (let s = 6; s <= 9; s++) await fire(s, s + 0.5, `stand-in-${s % 2}`, 10, 'standin');
    for (let s = 10; s <= 12; s++) await fire(s, s + 0.05, 'new', 11, 'schedule');
    const [newest] = await listElections(db.pool, tablesIn(db.schema), 'gap-test', 2);
    assert.equal(newest!.leader, 'new');
    assert.equal(newest!.gapMs, 1450, 'from old last fire (10:00:05.05) to the first stand-in fire (10:00:06.5)');
    assert.equal(newest!.handoverMs, 4600, 'the handover is still measured from the last renew');
  });

  it('retry by a stale replica is fenced: refused, nothing changes, and it steps down', async () => {
    await setFailing(db, true);
    const id = await settledFlakyRun();
    // No scheduled fire meanwhile: its commit would meet the fence first and end the tenure.
    assert.equal((await post(leader, '/api/jobs/beat/pause')).status, 200);
    const token = BigInt(leader.replica.lease()!.token);
    // A newer leader (split brain: another lease service, say) has committed with a higher token.
    await db.pool.query('UPDATE cw_fences SET token = $2 WHERE resource = $1', [
      `scheduler/${leader.replica.leaseName}`,
      (token + 1n).toString(),
    ]);
    const res = await post(leader, `/api/runs/${id}/retry`);
    const body = await json(res);
    assert.equal(res.status, 409, JSON.stringify(body));
    assert.equal(body.code, 'fenced', JSON.stringify(body));
    assert.equal(await runState(id), 'failed');
    const attempts = await db.pool.query('SELECT 1 FROM cw_run_attempts WHERE run_id = $1', [id]);
    assert.equal(attempts.rowCount, 1, 'no new attempt');
    await until(async () => leader.replica.lease()?.token !== token, 'the stale tenure ends');
  });
});

describe('idempotency keys in the admin API', () => {
  it("a one-off run's key is shown as its handler sent it, and finds the run", async () => {
    await setFailing(db, false);
    const lead = (await firstLeader(cluster.nodes.map((n) => n.replica))) === leader.replica ? leader : follower;
    const res = await fetch(`${lead.url}/api/jobs/flaky/once`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ key: 'invoice-7@eu#1' }),
    });
    assert.equal(res.status, 201);
    const runId = (await json(res)).runId as string;
    await until(async () => (await runState(runId)) === 'completed', `one-off run ${runId} completes`);
    const run = await json(await fetch(`${follower.url}/api/runs/${runId}`));
    const sent = await db.pool.query('SELECT idempotency_key FROM public.console_effects WHERE run_id = $1', [runId]);
    assert.equal(run.idempotencyKey, sent.rows[0].idempotency_key, 'the key the handler sent');
    assert.equal(run.idempotencyKey, `flaky@${run.scheduledAt}#once:invoice-7@eu#1`);
    const found = await json(await fetch(`${lead.url}/api/runs?q=${encodeURIComponent(run.idempotencyKey)}`));
    assert.deepEqual(
      found.runs.map((r: { id: string }) => r.id),
      [runId],
    );
    const other = await json(
      await fetch(`${lead.url}/api/runs?q=${encodeURIComponent(`flaky@${run.scheduledAt}#once:x`)}`),
    );
    assert.deepEqual(other.runs, [], "another one-off key at the same instant is not this run's");
  });
});
