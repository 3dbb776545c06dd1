/**
 * What an operator watches, on in-process replicas (memory lease backend, real PostgreSQL ledger
 * and Redis, real BullMQ): the per-job metrics the alerts use (last fire, next fire, last success,
 * failure streak) on the leader's /metrics and on no follower's; every metric the shipped Grafana
 * dashboard and Prometheus rules name is one a replica exports; one info line per finished
 * attempt; and a replica with nothing due logs nothing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { parse } from 'yaml';
import { defineJob, type JobDefinition } from '../../src/jobs/define-job.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { ADMIN_TOKEN, SHARED_REDIS_URL, firstLeader, waitForRole } from './support.js';

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));

type LogLine = Record<string, unknown> & { level: number; msg: string; time: number };

/** Replicas of one namespace sharing a lease store, each logging (info and up) into `logs`. */
class Deployment {
  readonly store = new MemoryLeaseStore();
  readonly namespace = `obs${randomUUID().slice(0, 8)}`;
  readonly replicas: Replica[] = [];
  readonly logs: LogLine[] = [];

  constructor(
    private readonly db: TestDatabase,
    private readonly jobs: () => JobDefinition[],
  ) {}

  async add(id: string): Promise<Replica> {
    const logger = pino({ level: 'info' }, { write: (line: string) => void this.logs.push(JSON.parse(line)) });
    const replica = new Replica({
      replicaId: id,
      namespace: this.namespace,
      schema: this.db.schema,
      backend: new MemoryLeaseBackend({ store: this.store }),
      databaseUrl: this.db.url,
      redisUrl: SHARED_REDIS_URL,
      jobs: this.jobs(),
      election: { ttlMs: 3000 },
      shutdownGraceMs: 1000,
      admin: { port: 0, token: ADMIN_TOKEN },
      version: 'test',
      logger,
    });
    this.replicas.push(replica);
    await replica.start();
    return replica;
  }

  stop(): Promise<unknown> {
    return Promise.all(this.replicas.map((r) => r.stop()));
  }
}

/** The exposition's samples of `name`, by job label. */
function samples(text: string, name: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of text.matchAll(new RegExp(`^${name}\\{([^}]*)\\} (\\S+)$`, 'gm'))) {
    const job = /job="([^"]*)"/.exec(m[1]!)?.[1];
    if (job !== undefined) out.set(job, Number(m[2]));
  }
  return out;
}

async function scrape(replica: Replica): Promise<string> {
  const res = await fetch(`${replica.adminUrl!}/metrics`);
  assert.equal(res.status, 200);
  return res.text();
}

/** Scrape until `ready` holds (the leader needs a few fires and runs first). */
async function scrapeUntil(replica: Replica, ready: (text: string) => boolean, timeoutMs = 45_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = await scrape(replica);
    if (ready(text)) return text;
    if (Date.now() > deadline) throw new Error(`metrics not ready within ${timeoutMs} ms:\n${text}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Every cronwarden_* name in the PromQL expressions of `text`. */
function metricNames(text: string): Set<string> {
  return new Set([...text.matchAll(/\bcronwarden_[a-z0-9_]+/g)].map((m) => m[0]));
}

/** Metric families a replica exports, from the exposition's # TYPE lines. */
function exported(text: string): Map<string, string> {
  return new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
}

function isExported(name: string, families: Map<string, string>): boolean {
  if (families.has(name)) return true;
  const base = name.replace(/_(bucket|sum|count)$/, '');
  return base !== name && families.get(base) === 'histogram';
}

let db: TestDatabase;
before(async () => {
  db = await createTestDatabase();
});
after(async () => {
  await db.drop();
});

describe('metrics, dashboard and logs of a running deployment', () => {
  const jobs = () => [
    defineJob({ name: 'tick', schedule: '* * * * * *', handler: async () => {} }),
    defineJob({
      name: 'boom',
      schedule: '* * * * * *',
      handler: async () => {
        throw new Error('boom on purpose');
      },
    }),
    defineJob({ name: 'yearly', schedule: '0 0 1 1 *', timezone: 'Europe/Berlin', handler: async () => {} }),
  ];
  let deployment: Deployment;
  let leader: Replica;
  let follower: Replica;
  let text: string;

  before(async () => {
    deployment = new Deployment(db, jobs);
    const a = await deployment.add('obs-a');
    const b = await deployment.add('obs-b');
    leader = await firstLeader([a, b]);
    follower = leader === a ? b : a;
    await waitForRole(follower, 'candidate').catch(() => {});
    text = await scrapeUntil(
      leader,
      (t) =>
        (samples(t, 'cronwarden_job_consecutive_failures').get('boom') ?? 0) >= 3 &&
        samples(t, 'cronwarden_job_last_success_timestamp_seconds').has('tick'),
    );
  });
  after(() => deployment.stop());

  it('the leader exports per job: last fire, next fire after it, last success and the failure streak', () => {
    const now = Date.now() / 1000;
    const lastFire = samples(text, 'cronwarden_job_last_fire_timestamp_seconds');
    const nextFire = samples(text, 'cronwarden_job_next_fire_timestamp_seconds');
    const lastSuccess = samples(text, 'cronwarden_job_last_success_timestamp_seconds');
    const failures = samples(text, 'cronwarden_job_consecutive_failures');
    for (const job of ['tick', 'boom']) {
      assert.ok(Math.abs(now - lastFire.get(job)!) < 30, `${job} fired within the last 30 s: ${lastFire.get(job)}`);
      assert.equal(nextFire.get(job), lastFire.get(job)! + 1, `${job} is due one second after its last fire`);
    }
    assert.ok(now - lastSuccess.get('tick')! < 30, 'tick succeeded lately');
    assert.equal(failures.get('tick'), 0);
    assert.ok(failures.get('boom')! >= 3);
    assert.equal(lastSuccess.has('boom'), false, 'boom never succeeded');
    assert.equal(lastFire.has('yearly'), false, 'yearly never fired');
    assert.equal(failures.get('yearly'), 0);
    // The fires counter carries the job.
    assert.match(text, /^cronwarden_fires_total\{[^}]*job="tick"[^}]*\} [1-9]/m);
    assert.match(text, /^cronwarden_lease_ttl_seconds\{[^}]*\} 3$/m);
    const renewed = Number(/^cronwarden_lease_renewed_timestamp_seconds\{[^}]*\} (\S+)$/m.exec(text)![1]);
    assert.ok(now - renewed < 10, `the leader renewed within a few seconds: ${now - renewed} s ago`);
  });

  it('a follower exports no per-job series (one series per job in the deployment) and a renewal of 0', async () => {
    const t = await scrape(follower);
    assert.equal(samples(t, 'cronwarden_job_last_fire_timestamp_seconds').size, 0);
    assert.equal(samples(t, 'cronwarden_job_consecutive_failures').size, 0);
    assert.match(t, /^cronwarden_lease_renewed_timestamp_seconds\{[^}]*\} 0$/m);
    assert.match(t, /^# TYPE cronwarden_job_last_success_timestamp_seconds gauge$/m);
  });

  it('every metric the Grafana dashboard and the Prometheus rules name is exported by a replica', () => {
    const families = exported(text);
    const files = {
      'deploy/grafana/cronwarden.json': readFileSync(join(repoRoot, 'deploy/grafana/cronwarden.json'), 'utf8'),
      'deploy/prometheus/alerts.yml': readFileSync(join(repoRoot, 'deploy/prometheus/alerts.yml'), 'utf8'),
      'deploy/prometheus/alerts.test.yml': readFileSync(join(repoRoot, 'deploy/prometheus/alerts.test.yml'), 'utf8'),
    };
    // The files parse, and the dashboard's queries are where Grafana reads them.
    const dashboard = JSON.parse(files['deploy/grafana/cronwarden.json']) as {
      panels: { targets?: { expr: string }[] }[];
    };
    const exprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
    assert.ok(exprs.length >= 15, `the dashboard has its queries: ${exprs.length}`);
    const rules = parse(files['deploy/prometheus/alerts.yml']) as { groups: { rules: { expr: string }[] }[] };
    const ruleExprs = rules.groups.flatMap((g) => g.rules.map((r) => r.expr));
    assert.ok(ruleExprs.length >= 6);
    for (const [file, names] of [
      ['dashboard', metricNames(exprs.join('\n'))],
      ['alerts', metricNames(ruleExprs.join('\n'))],
      ['alert tests', metricNames(files['deploy/prometheus/alerts.test.yml'])],
    ] as const) {
      assert.ok(names.size > 5, `${file} names metrics`);
      const missing = [...names].filter((n) => !isExported(n, families));
      assert.deepEqual(missing, [], `${file} names metrics no replica exports`);
    }
  });

  it('logs one info line per finished attempt: job, run id, attempt, outcome, duration, token', () => {
    const finished = deployment.logs.filter((l) => l.msg === 'run attempt finished');
    const tick = finished.find((l) => l.job === 'tick' && l.outcome === 'completed');
    const boom = finished.find((l) => l.job === 'boom' && l.outcome === 'failed');
    for (const line of [tick, boom]) {
      assert.ok(line, `a finished line for each job: ${JSON.stringify(finished.slice(0, 3))}`);
      assert.equal(line.level, 30, 'info');
      assert.match(String(line.runId), /^\d+$/);
      assert.equal(line.attempt, 1);
      assert.equal(typeof line.durationMs, 'number');
      assert.match(String(line.token), /^\d+$/);
    }
    assert.equal(boom!.error, 'boom on purpose');
    // One line per attempt: no run id and attempt is reported twice.
    const keys = finished.map((l) => `${String(l.runId)}/${String(l.attempt)}`);
    assert.equal(new Set(keys).size, keys.length);
  });
});

describe('a quiet replica', () => {
  it('logs nothing at info while nothing is due', async () => {
    const own = await createTestDatabase(); // a ledger is bound to one namespace
    const deployment = new Deployment(own, () => [
      defineJob({ name: 'yearly', schedule: '0 0 1 1 *', handler: async () => {} }),
    ]);
    try {
      const replica = await deployment.add('quiet-a');
      await waitForRole(replica, 'leader');
      await new Promise((r) => setTimeout(r, 3000)); // start-up lines (election, catch-up) are over
      const before = deployment.logs.length;
      await new Promise((r) => setTimeout(r, 6000));
      const idle = deployment.logs.slice(before);
      assert.deepEqual(
        idle.map((l) => l.msg),
        [],
        'six idle seconds of a leader log nothing at info',
      );
    } finally {
      await deployment.stop();
      await own.drop();
    }
  });
});
