/**
 * The admin HTTP API of in-process replicas (memory lease backend, real PostgreSQL ledger and
 * Redis): each route's shape, auth refusals that change nothing, 400/404, a follower's 409 with
 * the leader's URL, and the Prometheus exposition; the probe listener's /healthz and /readyz.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseExposition, sampleValue } from '../support/exposition.js';
import { AdminServer } from '../../src/admin/server.js';
import { ProbeServer } from '../../src/admin/probe-server.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import {
  Cluster,
  ADMIN_TOKEN,
  SHARED_REDIS_URL,
  firstLeader,
  json,
  testJobs,
  waitForRole,
  type Node,
} from './support.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { pino } from 'pino';
import { systemClock, type Clock } from '../../src/clock.js';
import { Replica } from '../../src/replica/replica.js';
import { migrateDatabase } from '../../src/db/migrate.js';

let db: TestDatabase;
let cluster: Cluster;
let leader: Node;
let follower: Node;

before(async () => {
  db = await createTestDatabase();
  cluster = new Cluster(db.url, db.schema);
  const a = await cluster.add('api-a');
  const b = await cluster.add('api-b');
  const l = await firstLeader([a.replica, b.replica]);
  leader = l === a.replica ? a : b;
  follower = l === a.replica ? b : a;
  await waitForRole(follower.replica, 'candidate').catch(() => {});
});
after(async () => {
  await cluster.stopAll();
  await db.drop();
});

const post = (node: Node, path: string, token?: string) =>
  fetch(`${node.url}${path}`, {
    method: 'POST',
    headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
  });

async function paused(job: string): Promise<boolean> {
  const r = await db.pool.query<{ paused: boolean }>('SELECT paused FROM cw_job_state WHERE job = $1', [job]);
  return r.rows[0]?.paused ?? false;
}

describe('read routes', () => {
  it('GET /api/lease names the holder, token, TTL and this replica role, on leader and follower alike', async () => {
    for (const node of [leader, follower]) {
      const body = await json(await fetch(`${node.url}/api/lease`));
      assert.equal(body.backend, 'memory');
      assert.equal(body.leaseName, `cronwarden/${cluster.namespace}/scheduler`);
      assert.equal(body.holder, leader.replica.replicaId);
      assert.match(body.token, /^[1-9][0-9]*$/);
      assert.equal(body.ttlMs, 3000);
      assert.ok(body.expiresInMs > 0 && body.expiresInMs <= 3000, `expiresInMs ${body.expiresInMs}`);
      assert.ok(!Number.isNaN(Date.parse(body.leaderSince)), `leaderSince ${body.leaderSince}`);
      assert.equal(body.leaderAdminUrl, leader.url);
      assert.equal(body.replicaId, node.replica.replicaId);
      assert.equal(body.role, node === leader ? 'leader' : node.replica.role);
    }
  });

  it('GET /api/members lists both replicas with host, pid, version, role and admin URL', async () => {
    const body = await json(await fetch(`${follower.url}/api/members`));
    const ids = body.members.map((m: { replicaId: string }) => m.replicaId).sort();
    assert.deepEqual(ids, ['api-a', 'api-b']);
    const l = body.members.find((m: { replicaId: string }) => m.replicaId === leader.replica.replicaId);
    assert.equal(l.role, 'leader');
    assert.equal(l.pid, process.pid);
    assert.equal(l.version, 'test');
    assert.equal(l.adminUrl, leader.url);
    assert.equal(typeof l.host, 'string');
    assert.ok(l.lastSeenAgoMs >= 0 && l.lastSeenAgoMs < 10_000);
  });

  it('GET /api/members: roles come from the lease; a killed leader is no second leader, and is marked as stopped', async () => {
    // What `kill -9` of a leader leaves in the ledger: its row, still saying "leader", no longer beating;
    // and a follower campaigning says "candidate" in its own row.
    await db.pool.query(
      `INSERT INTO cw_members (replica_id, host, pid, version, role, admin_url, jobs, started_at, last_seen)
       VALUES ('api-killed', 'h', 1, 'test', 'leader', NULL, '{}', now() - interval '5 minutes', now() - interval '20 seconds'),
              ('api-campaigning', 'h', 2, 'test', 'candidate', NULL, '{}', now(), now())`,
    );
    try {
      const body = await json(await fetch(`${follower.url}/api/members`));
      type Member = { replicaId: string; role: string; stoppedBeating: boolean };
      const byId = new Map((body.members as Member[]).map((m) => [m.replicaId, m]));
      assert.deepEqual(
        body.members
          .filter((m: { role: string }) => m.role === 'leader')
          .map((m: { replicaId: string }) => m.replicaId),
        [leader.replica.replicaId],
        'one leader: the lease holder',
      );
      assert.deepEqual(
        ['api-killed', 'api-campaigning', leader.replica.replicaId].map((id) => {
          const { role, stoppedBeating } = byId.get(id)!;
          return { id, role, stoppedBeating };
        }),
        [
          { id: 'api-killed', role: 'follower', stoppedBeating: true },
          { id: 'api-campaigning', role: 'follower', stoppedBeating: false },
          { id: leader.replica.replicaId, role: 'leader', stoppedBeating: false },
        ],
      );
    } finally {
      await db.pool.query("DELETE FROM cw_members WHERE replica_id IN ('api-killed', 'api-campaigning')");
    }
  });

  it('GET /api/jobs shows schedule, timezone, next fire, last run and paused', async () => {
    // Wait for a tick run to exist, through the ledger rather than a sleep.
    await waitUntil(
      async () =>
        (await db.pool.query("SELECT 1 FROM cw_runs WHERE job = 'tick' AND state = 'completed'")).rowCount! > 0,
    );
    const body = await json(await fetch(`${leader.url}/api/jobs`));
    const tick = body.jobs.find((j: { name: string }) => j.name === 'tick');
    const yearly = body.jobs.find((j: { name: string }) => j.name === 'yearly');
    assert.equal(tick.schedule, '*/2 * * * * *');
    assert.equal(tick.timezone, 'UTC');
    assert.equal(tick.paused, false);
    assert.ok(Date.parse(tick.nextFireAt) > Date.now() - 1000);
    assert.equal(tick.lastRun.trigger, 'schedule');
    assert.match(tick.lastRun.runId, /^[0-9]+$/);
    assert.equal(yearly.timezone, 'Europe/Berlin');
    assert.equal(yearly.nextFireAt.slice(5), '12-31T23:00:00.000Z');
    assert.equal(yearly.lastRun, null);
  });

  it('GET /api/runs pages newest first, filters by job and state; GET /api/runs/:id has the attempts', async () => {
    await waitUntil(
      async () =>
        (await db.pool.query("SELECT 1 FROM cw_runs WHERE job = 'tick' AND state = 'completed'")).rowCount! >= 2,
    );
    const page1 = await json(await fetch(`${leader.url}/api/runs?job=tick&state=completed&limit=1`));
    assert.equal(page1.runs.length, 1);
    const run = page1.runs[0];
    assert.equal(run.job, 'tick');
    assert.equal(run.state, 'completed');
    assert.equal(run.attemptCount, 1);
    assert.equal(run.skippedAttempts, 0);
    assert.match(page1.nextCursor, /^[0-9]+\.[0-9]+$/);
    const page2 = await json(
      await fetch(`${leader.url}/api/runs?job=tick&state=completed&limit=1&cursor=${page1.nextCursor}`),
    );
    assert.equal(page2.runs.length, 1);
    assert.ok(page2.runs[0].scheduledAt < run.scheduledAt, 'older on the next page');
    const detail = await json(await fetch(`${leader.url}/api/runs/${run.id}`));
    assert.equal(detail.completedAttempt, 1);
    assert.equal(detail.attempts.length, 1);
    assert.equal(detail.attempts[0].state, 'completed');
    assert.match(detail.attempts[0].token, /^[0-9]+$/);
    const none = await json(await fetch(`${leader.url}/api/runs?job=yearly&state=failed`));
    assert.deepEqual(none, { runs: [], nextCursor: null });
  });

  it('GET /api/runs orders runs of one instant by id as numbers, and paging never repeats a row', async () => {
    // Enough rows that their ids cross a digit (9 → 10 … 99 → 100 as text would sort wrongly).
    await db.pool.query(
      `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state)
       SELECT 'ordering', date_trunc('second', now()), 'manual', 1, 'test', 'completed' FROM generate_series(1, 95) AS n`,
    );
    const seen: bigint[] = [];
    let cursor: string | null = null;
    do {
      const page = (await json(
        await fetch(`${leader.url}/api/runs?job=ordering&limit=7${cursor ? `&cursor=${cursor}` : ''}`),
      )) as { runs: { id: string }[]; nextCursor: string | null };
      seen.push(...page.runs.map((r) => BigInt(r.id)));
      cursor = page.nextCursor;
    } while (cursor !== null && seen.length < 200);
    assert.equal(seen.length, 95, 'every row once');
    for (let i = 1; i < seen.length; i++)
      assert.ok(seen[i]! < seen[i - 1]!, `newest first by number: ${seen.slice(0, 15).join(', ')}`);
  });

  it('GET /api/runs of a job no replica defines (renamed or removed) is its history, not a 404', async () => {
    await db.pool.query(
      `INSERT INTO cw_runs (job, scheduled_at, leader_token, leader_id, state) VALUES ('removed-job', now(), 1, 'old', 'completed')`,
    );
    const body = await json(await fetch(`${leader.url}/api/runs?job=removed-job`));
    assert.equal(body.runs.length, 1);
    assert.equal(body.runs[0].job, 'removed-job');
  });

  it('GET /api/elections lists won elections with token', async () => {
    const body = await json(await fetch(`${follower.url}/api/elections`));
    assert.ok(body.elections.length >= 1);
    const e = body.elections[0];
    assert.equal(e.leader, leader.replica.replicaId);
    assert.match(e.token, /^[1-9][0-9]*$/);
    assert.equal(e.backend, 'memory');
    assert.ok(!Number.isNaN(Date.parse(e.electedAt)));
    assert.ok('gapMs' in e && 'previousLeader' in e);
  });

  it('GET /healthz and /readyz answer 200 with their checks', async () => {
    const h = await fetch(`${leader.url}/healthz`);
    assert.equal(h.status, 200);
    assert.deepEqual(await json(h), { ok: true, role: 'leader', replicaId: leader.replica.replicaId });
    const r = await fetch(`${follower.url}/readyz`);
    assert.equal(r.status, 200);
    assert.deepEqual(await json(r), { ok: true, backend: 'ok', database: 'ok' });
  });

  it('GET /healthz is 503 when the replica still says leader but its lease deadline has passed', async () => {
    // A leader whose event loop stalled: its monotonic clock moved past the deadline before the
    // deadline timer could run. Modelled by moving the monotonic clock without running timers.
    let stalledMs = 0;
    const clock: Clock = { ...systemClock, monotonic: () => systemClock.monotonic() + stalledMs };
    const backend = new MemoryLeaseBackend({ store: new MemoryLeaseStore(), clock });
    // Another deployment on the same database: its own schema, derived from its namespace.
    const namespace = `${cluster.namespace}-stalled`;
    await migrateDatabase(db.url, { namespace });
    const replica = new Replica({
      replicaId: 'stalled',
      namespace,
      backend,
      databaseUrl: db.url,
      redisUrl: SHARED_REDIS_URL,
      jobs: testJobs(),
      election: { ttlMs: 3000 },
      worker: { enabled: false },
      clock,
      logger: pino({ level: 'silent' }),
    });
    // The probe listener answers the same, from its own port.
    const admin = new AdminServer({ replica, backend, databaseUrl: db.url, port: 0, probe: { port: 0 } });
    try {
      await replica.start();
      const url = await admin.listen();
      await waitForRole(replica, 'leader');
      for (const base of [url, admin.probeUrl!]) assert.equal((await fetch(`${base}/healthz`)).status, 200, base);
      stalledMs = 5000;
      for (const base of [url, admin.probeUrl!]) {
        const res = await fetch(`${base}/healthz`);
        assert.equal(res.status, 503, base);
        assert.deepEqual(await json(res), {
          ok: false,
          error: 'leading past the lease deadline without a renew',
          role: 'leader',
        });
      }
    } finally {
      await admin.close();
      await replica.stop();
    }
  });

  it('GET /readyz is 503 naming the check that failed when the lease backend does not answer', async () => {
    const broken = new MemoryLeaseBackend({ store: cluster.store });
    broken.current = () => new Promise(() => {}); // a backend that never answers
    const admin = new AdminServer({
      replica: follower.replica,
      backend: broken,
      databaseUrl: db.url,
      port: 0,
      readyTimeoutMs: 200,
    });
    const probes = new ProbeServer({ replica: follower.replica, backend: broken, port: 0, readyTimeoutMs: 200 });
    const url = await admin.listen();
    const probeUrl = await probes.listen();
    try {
      for (const base of [url, probeUrl]) {
        const res = await fetch(`${base}/readyz`);
        assert.equal(res.status, 503, base);
        assert.deepEqual(await json(res), {
          ok: false,
          backend: 'readiness check: no answer within 200 ms',
          database: 'ok',
        });
      }
    } finally {
      await admin.close();
      await probes.close();
    }
  });

  it('GET / serves the console page', async () => {
    const res = await fetch(`${follower.url}/`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/html/);
    assert.match(await res.text(), /id="holder"/);
  });
});

describe('probe listener', () => {
  it('a replica with a probe port answers /healthz and /readyz there as on the admin port, and nothing else', async () => {
    const replica = new Replica({
      replicaId: 'api-probed',
      namespace: cluster.namespace,
      schema: cluster.schema,
      backend: new MemoryLeaseBackend({ store: cluster.store }),
      databaseUrl: db.url,
      redisUrl: SHARED_REDIS_URL,
      jobs: testJobs(),
      election: { ttlMs: 3000 },
      worker: { enabled: false },
      admin: { port: 0, probe: { port: 0 } },
      logger: pino({ level: 'silent' }),
    });
    await replica.start();
    const probeUrl = replica.probeUrl!;
    try {
      assert.notEqual(probeUrl, replica.adminUrl);
      const health = await fetch(`${probeUrl}/healthz`);
      assert.equal(health.status, 200);
      assert.deepEqual(await json(health), { ok: true, role: replica.role, replicaId: 'api-probed' });
      assert.deepEqual(
        await json(await fetch(`${replica.adminUrl}/healthz`)),
        await json(await fetch(`${probeUrl}/healthz`)),
      );
      const ready = await fetch(`${probeUrl}/readyz`);
      assert.equal(ready.status, 200);
      assert.deepEqual(await json(ready), { ok: true, backend: 'ok', database: 'ok' });
      const head = await fetch(`${probeUrl}/healthz`, { method: 'HEAD' });
      assert.equal(head.status, 200);
      assert.equal(await head.text(), '');
      const other = await fetch(`${probeUrl}/api/lease`);
      assert.equal(other.status, 404);
      assert.equal((await json(other)).code, 'not_found');
      const post = await fetch(`${probeUrl}/readyz`, { method: 'POST' });
      assert.equal(post.status, 405);
      assert.equal(post.headers.get('allow'), 'GET, HEAD');
    } finally {
      await replica.stop();
    }
    await assert.rejects(fetch(`${probeUrl}/healthz`), 'closed with the replica');
  });

  it("/healthz fails when the probe thread's heartbeat is older than the stall limit, and recovers with the next beat", async () => {
    // This thread's event loop, driven: its time moves only when told, its heartbeat runs when told.
    let now = 0;
    let beat: (() => void) | undefined;
    const loopClock: Clock = {
      ...systemClock,
      monotonic: () => now,
      setTimer: (fn) => {
        beat = fn;
        return { cancel: () => (beat = undefined) };
      },
    };
    const r = follower.replica;
    const probes = new ProbeServer({
      replica: r,
      backend: new MemoryLeaseBackend({ store: cluster.store }),
      port: 0,
      stallLimitMs: 1000,
      loopClock,
    });
    const url = await probes.listen();
    try {
      assert.equal((await fetch(`${url}/healthz`)).status, 200);
      now += 1000;
      assert.equal((await fetch(`${url}/healthz`)).status, 200, 'at the limit');
      now += 1;
      const stale = await fetch(`${url}/healthz`);
      assert.equal(stale.status, 503);
      assert.deepEqual(await json(stale), {
        ok: false,
        error: "the scheduler's event loop has not answered for 1001 ms",
        role: r.role,
      });
      beat!();
      assert.equal((await fetch(`${url}/healthz`)).status, 200);
    } finally {
      await probes.close();
    }
    assert.equal(beat, undefined, 'close stops the heartbeat');
  });
});

describe('bad requests', () => {
  for (const [path, field] of [
    ['/api/runs?limit=abc', 'limit'],
    ['/api/runs?limit=0', 'limit'],
    ['/api/runs?state=exploded', 'state'],
    ['/api/runs?cursor=-3', 'cursor'],
    ['/api/elections?limit=100000', 'limit'],
  ] as const) {
    it(`GET ${path} is 400 naming ${field}`, async () => {
      const res = await fetch(`${leader.url}${path}`);
      assert.equal(res.status, 400);
      const body = await json(res);
      assert.equal(body.code, 'bad_request');
      assert.match(body.error, new RegExp(`^${field}: `));
    });
  }
  it('unknown job is 404 on trigger, pause and resume', async () => {
    for (const action of ['trigger', 'pause', 'resume']) {
      const res = await post(leader, `/api/jobs/nope/${action}`, ADMIN_TOKEN);
      assert.equal(res.status, 404, action);
      assert.deepEqual(await json(res), { error: 'unknown job "nope"', code: 'unknown_job' });
    }
  });
  it('a job name with forbidden characters is 400', async () => {
    const res = await post(leader, `/api/jobs/${encodeURIComponent('a b<')}/pause`, ADMIN_TOKEN);
    assert.equal(res.status, 400);
    assert.match((await json(res)).error, /^name: /);
  });
});

describe('mutations', () => {
  it('are refused (401) without a token or with a wrong one, and nothing changes', async () => {
    const runsBefore = (await db.pool.query("SELECT count(*)::int AS n FROM cw_runs WHERE trigger = 'manual'")).rows[0]
      .n;
    const tokenBefore = (await json(await fetch(`${leader.url}/api/lease`))).token;
    for (const token of [undefined, '', 'wrong', `${ADMIN_TOKEN}x`, ADMIN_TOKEN.slice(0, -1)]) {
      for (const path of ['/api/jobs/tick/pause', '/api/jobs/yearly/trigger', '/api/resign']) {
        const res = await post(leader, path, token);
        assert.equal(res.status, 401, `${path} with ${token}`);
        assert.equal((await json(res)).code, 'unauthorized');
      }
    }
    const basic = await fetch(`${leader.url}/api/jobs/tick/pause`, {
      method: 'POST',
      headers: { authorization: `Basic ${ADMIN_TOKEN}` },
    });
    assert.equal(basic.status, 401);
    assert.equal(await paused('tick'), false);
    assert.equal(
      (await db.pool.query("SELECT count(*)::int AS n FROM cw_runs WHERE trigger = 'manual'")).rows[0].n,
      runsBefore,
    );
    assert.equal(leader.replica.role, 'leader');
    assert.equal((await json(await fetch(`${leader.url}/api/lease`))).token, tokenBefore);
  });

  it('pause and resume work on any replica and show in /api/jobs', async () => {
    const res = await post(follower, '/api/jobs/tick/pause', ADMIN_TOKEN);
    assert.equal(res.status, 200);
    const body = await json(res);
    // No body: paused until resumed, by "admin" (see test/admin/job-policies-api.test.ts for reason and until).
    assert.deepEqual(
      [body.job, body.paused, body.pausedBy, body.pausedReason, body.pausedUntil],
      ['tick', true, 'admin', null, null],
    );
    assert.equal(await paused('tick'), true);
    const jobs = await json(await fetch(`${leader.url}/api/jobs`));
    assert.equal(jobs.jobs.find((j: { name: string }) => j.name === 'tick').paused, true);
    assert.equal((await post(leader, '/api/jobs/tick/resume', ADMIN_TOKEN)).status, 200);
    assert.equal(await paused('tick'), false);
  });

  it('trigger on the leader commits a manual run; on a follower it is 409 with the leader URL', async () => {
    const res = await post(leader, '/api/jobs/yearly/trigger', ADMIN_TOKEN);
    assert.equal(res.status, 200);
    const body = await json(res);
    assert.equal(body.job, 'yearly');
    const row = await db.pool.query('SELECT job, trigger FROM cw_runs WHERE id = $1', [body.runId]);
    assert.deepEqual(row.rows[0], { job: 'yearly', trigger: 'manual' });

    const f = await post(follower, '/api/jobs/yearly/trigger', ADMIN_TOKEN);
    assert.equal(f.status, 409);
    const fb = await json(f);
    assert.equal(fb.code, 'not_leader');
    assert.equal(fb.leader, leader.replica.replicaId);
    assert.equal(fb.leaderAdminUrl, leader.url);
    const r = await post(follower, '/api/resign', ADMIN_TOKEN);
    assert.equal(r.status, 409);
    assert.equal((await json(r)).leaderAdminUrl, leader.url);
  });
});

describe('metrics', () => {
  it('GET /metrics is Prometheus text with the named series and numeric values', async () => {
    await waitUntil(
      async () =>
        (
          await db.pool.query("SELECT 1 FROM cw_run_attempts WHERE worker = $1 AND state = 'completed'", [
            leader.replica.replicaId,
          ])
        ).rowCount! > 0,
    );
    const res = await fetch(`${leader.url}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    const samples = parseExposition(await res.text());
    const value = (name: string, labels: Record<string, string> = {}) => sampleValue(samples, name, labels);
    assert.equal(value('cronwarden_is_leader'), 1);
    assert.ok(value('cronwarden_lease_token')! >= 1);
    assert.ok(value('cronwarden_fires_total', { job: 'tick', trigger: 'schedule' })! >= 1, 'fires carry the job');
    assert.ok(value('cronwarden_fires_total', { trigger: 'manual' })! >= 1);
    assert.ok(value('cronwarden_fire_lateness_seconds_count', { trigger: 'schedule' })! >= 1);
    assert.ok(value('cronwarden_run_attempts_total', { job: 'tick', outcome: 'completed' })! >= 1);
    assert.ok(value('cronwarden_run_duration_seconds_count', { job: 'tick', outcome: 'completed' })! >= 1);
    for (const name of [
      'cronwarden_fires_duplicate_total',
      'cronwarden_fires_refused_total',
      'cronwarden_lease_renew_latency_seconds_count',
      'cronwarden_leader_elections_total',
    ]) {
      assert.equal(typeof value(name), 'number', name);
    }
    assert.equal(value('cronwarden_runs_active', { state: 'pending' }) !== undefined, true);
    // Same host, same clock as the ledger's server here: off by no more than the sync's error.
    assert.ok(
      Math.abs(value('cronwarden_host_clock_offset_seconds')!) < 0.5,
      `offset ${value('cronwarden_host_clock_offset_seconds')}`,
    );
    for (const s of samples)
      assert.ok(Number.isFinite(s.value) || Math.abs(s.value) === Infinity, `${s.name} ${s.value}`);
    assert.equal(value('cronwarden_is_leader', { replica: leader.replica.replicaId, namespace: cluster.namespace }), 1);
    const f = parseExposition(await (await fetch(`${follower.url}/metrics`)).text());
    assert.equal(f.find((s) => s.name === 'cronwarden_is_leader')?.value, 0);
    // The cluster-wide gauge comes from the leader alone, so a sum over replicas stays right.
    assert.equal(
      f.some((s) => s.name === 'cronwarden_runs_active'),
      false,
      'a follower exports no cronwarden_runs_active',
    );
    // The stock Node.js names, as dashboards expect them.
    assert.equal(typeof value('process_cpu_seconds_total'), 'number');
    assert.equal(
      samples.some((s) => s.name.startsWith('cronwarden_process_')),
      false,
    );
  });
});

async function waitUntil(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 100));
  }
}
