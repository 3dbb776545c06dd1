/**
 * Issue 13 §1: two deployments (same job names, different namespaces, three replicas each) and a
 * drizzle application share one PostgreSQL database and one Redis. Each deployment's ledger lives
 * in its own schema; nothing of cronwarden goes into `public` or `drizzle`.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { pino } from 'pino';
import { Queue } from 'bullmq';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate as drizzleMigrate } from 'drizzle-orm/node-postgres/migrator';
import { migrateDatabase } from '../../src/db/migrate.js';
import { schemaForNamespace, validateSchemaName } from '../../src/db/tables.js';
import { InvalidConfigError, NamespaceMismatchError } from '../../src/errors.js';
import { defineJob } from '../../src/jobs/define-job.js';
import { queueName } from '../../src/jobs/bullmq-names.js';
import type { LeaseBackend } from '../../src/locks/lease.js';
import { MemoryLeaseBackend } from '../../src/locks/memory.js';
import { PostgresLeaseBackend } from '../../src/locks/postgres.js';
import { RedisLeaseBackend } from '../../src/locks/redis.js';
import { Replica } from '../../src/replica/replica.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';
import { migrationsFolder } from '../../src/db/migrate.js';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { Ledger } from '../../src/ledger/ledger.js';
import { copyFile, readFile } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const TOKEN = 'isolation-admin-token-0123456789';

/** A drizzle application's migrations folder, as drizzle-kit lays it out; `when` older than cronwarden's. */
async function appMigrations(dir: string, count: number): Promise<string> {
  await mkdir(join(dir, 'meta'), { recursive: true });
  const entries = Array.from({ length: count }, (_, i) => ({
    idx: i,
    version: '7',
    when: 1_700_000_000_000 + i * 1000,
    tag: `000${i}_app`,
    breakpoints: true,
  }));
  for (const e of entries)
    await writeFile(join(dir, `${e.tag}.sql`), `CREATE TABLE "app_table_${e.idx}" ("id" serial PRIMARY KEY NOT NULL);`);
  await writeFile(join(dir, 'meta', '_journal.json'), JSON.stringify({ version: '7', dialect: 'postgresql', entries }));
  return dir;
}

/** Apply an application's migrations the way a drizzle application does: drizzle's migrate(), default journal. */
async function applyAppMigrations(url: string, folder: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await drizzleMigrate(drizzle(client), { migrationsFolder: folder });
  } finally {
    await client.end();
  }
}

async function regclass(pool: pg.Pool, name: string): Promise<string | null> {
  return (await pool.query<{ r: string | null }>('SELECT to_regclass($1)::text AS r', [name])).rows[0]!.r;
}

interface Node {
  replica: Replica;
  url: string;
}

class Deployment {
  readonly nodes: Node[] = [];
  readonly ids: string[];
  readonly schema: string;

  constructor(
    readonly namespace: string,
    private readonly db: TestDatabase,
    private readonly backendKind: 'postgres' | 'redis',
  ) {
    this.ids = [1, 2, 3].map((i) => `${namespace}-r${i}`);
    this.schema = schemaForNamespace(namespace);
  }

  /** Jobs with the same names in every deployment; each execution is written with its deployment and replica. */
  private jobs(replicaId: string) {
    const handler = async (ctx: import('../../src/jobs/job-context.js').JobContext) => {
      await ctx.transaction(async (tx) => {
        // Unqualified: must resolve as it would without cronwarden (to public), never to our schema.
        await tx.query(
          'INSERT INTO iso_effects (namespace, job, scheduled_at, run_id, replica, seen_schema) VALUES ($1, $2, $3, $4, $5, current_schema())',
          [this.namespace, ctx.jobName, ctx.scheduledAt, ctx.runId, replicaId],
        );
      });
    };
    return [
      defineJob({ name: 'tick', schedule: '* * * * * *', handler }),
      defineJob({ name: 'tock', schedule: '* * * * * *', handler }),
    ];
  }

  async start(): Promise<void> {
    for (const id of this.ids) {
      const backend: LeaseBackend =
        this.backendKind === 'postgres'
          ? new PostgresLeaseBackend({ connectionString: this.db.url, schema: this.schema })
          : new RedisLeaseBackend({ url: SHARED_REDIS_URL });
      // No schema given: each deployment's default, derived from its namespace.
      const replica = new Replica({
        replicaId: id,
        namespace: this.namespace,
        backend,
        databaseUrl: this.db.url,
        redisUrl: SHARED_REDIS_URL,
        jobs: this.jobs(id),
        election: { ttlMs: 3000 },
        shutdownGraceMs: 1000,
        admin: { port: 0, token: TOKEN },
        version: 'test',
        logger: pino({ level: 'silent' }),
      });
      await replica.start();
      this.nodes.push({ replica, url: replica.adminUrl! });
    }
  }

  async get(path: string, init?: RequestInit): Promise<any> {
    const res = await fetch(`${this.nodes[0]!.url}${path}`, init);
    assert.equal(res.status, 200, `${this.namespace} ${path}: ${res.status}`);
    return path === '/metrics' ? res.text() : res.json();
  }

  async stop(): Promise<void> {
    await Promise.all(
      this.nodes.map(async (n) => {
        await n.replica.stop();
      }),
    );
  }
}

describe('isolation: two deployments and a drizzle application on one PostgreSQL and one Redis', () => {
  let db: TestDatabase;
  let appDir: string;

  before(async () => {
    db = await createTestDatabase({ migrate: false });
    appDir = await mkdtemp(join(tmpdir(), 'cw-app-'));
  });
  after(async () => {
    await db.drop();
    await rm(appDir, { recursive: true, force: true });
  });

  it(
    'each slot of each deployment exactly once; each admin API shows only its own deployment; the application migrates before and after',
    { timeout: 120_000 },
    async () => {
      const suffix = randomUUID().slice(0, 6);
      const a = new Deployment(`iso-a-${suffix}`, db, 'postgres');
      const b = new Deployment(`iso-b-${suffix}`, db, 'redis');

      // The application migrates first (drizzle's default journal), then both deployments, then the
      // application adds a migration whose timestamp is older than cronwarden's newest: it applies.
      await applyAppMigrations(db.url, await appMigrations(appDir, 1));
      for (const d of [a, b])
        assert.equal((await migrateDatabase(db.url, { namespace: d.namespace })).schema, d.schema);
      await applyAppMigrations(db.url, await appMigrations(appDir, 2));
      assert.ok(
        await regclass(db.pool, 'public.app_table_1'),
        "the application's migration after cronwarden migrate applied",
      );
      const appJournal = await db.pool.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM drizzle.__drizzle_migrations',
      );
      assert.equal(appJournal.rows[0]!.n, 2, "drizzle's journal holds the application's rows only");
      const ours = await db.pool.query<{ relname: string }>(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname IN ('public', 'drizzle') AND c.relname LIKE 'cw\\_%'",
      );
      assert.deepEqual(ours.rows, [], 'nothing of cronwarden in public or drizzle');
      assert.notEqual(a.schema, b.schema);

      await db.pool.query(
        'CREATE TABLE iso_effects (namespace text NOT NULL, job text NOT NULL, scheduled_at timestamptz NOT NULL, run_id bigint NOT NULL, replica text NOT NULL, seen_schema text)',
      );
      try {
        await a.start();
        await b.start();
        // A pause in one deployment is not a pause in the other.
        const paused = await a.get('/api/jobs/tock/pause', {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}` },
        });
        assert.deepEqual([paused.job, paused.paused, paused.pausedBy], ['tock', true, 'admin']);
        const pausedAt = Date.now();
        const from = new Date(Math.ceil((Date.now() + 2000) / 1000) * 1000);
        await sleep(10_000);
        const to = new Date(Math.floor((Date.now() - 2000) / 1000) * 1000);
        const expected = (to.getTime() - from.getTime()) / 1000 + 1;

        for (const [d, other] of [
          [a, b],
          [b, a],
        ] as const) {
          const runsOf = async (job: string) =>
            (
              await db.pool.query<{ id: string; scheduled_at: Date; leader_id: string; state: string }>(
                `SELECT id::text, scheduled_at, leader_id, state FROM "${d.schema}".cw_runs WHERE job = $1 AND trigger <> 'manual' AND scheduled_at BETWEEN $2 AND $3 ORDER BY scheduled_at`,
                [job, from, to],
              )
            ).rows;
          // Let the window's runs finish.
          for (
            let i = 0;
            i < 50 && (await runsOf('tick')).some((r) => ['pending', 'running', 'retrying'].includes(r.state));
            i++
          )
            await sleep(200);
          const ticks = await runsOf('tick');
          assert.equal(ticks.length, expected, `${d.namespace}: one tick per second of the window`);
          assert.equal(
            new Set(ticks.map((r) => r.scheduled_at.getTime())).size,
            expected,
            `${d.namespace}: no slot twice`,
          );
          assert.ok(
            ticks.every((r) => r.state === 'completed'),
            `${d.namespace}: ${JSON.stringify(ticks.filter((r) => r.state !== 'completed'))}`,
          );
          const all = await db.pool.query<{ leader_id: string }>(
            `SELECT DISTINCT leader_id FROM "${d.schema}".cw_runs`,
          );
          assert.ok(
            all.rows.every((r) => d.ids.includes(r.leader_id)),
            `${d.namespace}: only its own leaders fired: ${JSON.stringify(all.rows)}`,
          );

          const effects = await db.pool.query<{ run_id: string; replica: string; seen_schema: string; n: number }>(
            `SELECT run_id::text, min(replica) AS replica, min(seen_schema) AS seen_schema, count(*)::int AS n FROM iso_effects
           WHERE namespace = $1 AND job = 'tick' AND scheduled_at BETWEEN $2 AND $3 GROUP BY run_id`,
            [d.namespace, from, to],
          );
          assert.deepEqual(
            effects.rows.map((e) => e.run_id).sort(),
            ticks.map((r) => r.id).sort(),
            `${d.namespace}: one effect per run, each from its own ledger`,
          );
          assert.ok(
            effects.rows.every((e) => e.n === 1),
            `${d.namespace}: no effect twice`,
          );
          const ran = await db.pool.query<{ replica: string }>(
            'SELECT DISTINCT replica FROM iso_effects WHERE namespace = $1',
            [d.namespace],
          );
          assert.ok(
            ran.rows.every((r) => d.ids.includes(r.replica)),
            `${d.namespace}: only its own workers ran its runs`,
          );
          assert.ok(
            effects.rows.every((e) => e.seen_schema === 'public'),
            "the handler's unqualified names resolve as without cronwarden",
          );

          // Pause flags: A paused tock, B did not.
          const tocks = await runsOf('tock');
          const late = tocks.filter((r) => r.scheduled_at.getTime() > pausedAt + 1000);
          assert.ok(late.length >= expected - 2, `${d.namespace}: tock fired into the ledger`);
          assert.ok(
            late.every((r) => (r.state === 'skipped') === (d === a)),
            `${d.namespace}: tock ${d === a ? 'paused' : 'running'}: ${JSON.stringify(late.map((r) => r.state))}`,
          );

          // The admin API: only this deployment's members, jobs, runs, elections, lease and metrics.
          const members = (await d.get('/api/members')).members as { replicaId: string }[];
          assert.deepEqual(members.map((m) => m.replicaId).sort(), [...d.ids].sort(), `${d.namespace}: members`);
          const jobs = (await d.get('/api/jobs')).jobs as {
            name: string;
            paused: boolean;
            lastRun: { runId: string } | null;
          }[];
          assert.deepEqual(
            jobs.map((j) => [j.name, j.paused]),
            [
              ['tick', false],
              ['tock', d === a],
            ],
          );
          const runs = (await d.get('/api/runs?limit=200')).runs as { id: string; leaderId: string; job: string }[];
          assert.ok(runs.length > 0 && runs.every((r) => d.ids.includes(r.leaderId)), `${d.namespace}: runs`);
          const ownIds = new Set(
            (await db.pool.query<{ id: string }>(`SELECT id::text FROM "${d.schema}".cw_runs`)).rows.map((r) => r.id),
          );
          assert.ok(jobs.every((j) => j.lastRun && ownIds.has(j.lastRun.runId)));
          const elections = (await d.get('/api/elections')).elections as { leader: string }[];
          assert.ok(
            elections.length >= 1 && elections.every((e) => d.ids.includes(e.leader)),
            `${d.namespace}: elections ${JSON.stringify(elections)}`,
          );
          const lease = await d.get('/api/lease');
          assert.ok(
            d.ids.includes(lease.holder) && String(lease.leaseName).includes(d.namespace),
            JSON.stringify(lease),
          );
          const metrics = (await d.get('/metrics')) as string;
          assert.match(metrics, new RegExp(`namespace="${d.namespace}"`));
          assert.doesNotMatch(metrics, new RegExp(`namespace="${other.namespace}"`));
          // A fire refused as a duplicate has an explanation inside this deployment: a follower stood
          // in for a late leader (trigger 'standin'; the leader's own fire, or a second stand-in's,
          // then meets the unique key), or leadership moved and the new leader's catch-up re-offered
          // its predecessor's slots. Otherwise none, on any replica.
          const standIns = await db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM "${d.schema}".cw_runs WHERE trigger = 'standin'`,
          );
          const later = new Set(elections.slice(0, -1).map((e) => e.leader));
          for (const n of d.nodes) {
            const text = await (await fetch(`${n.url}/metrics`)).text();
            const dup = text.split('\n').find((l) => l.startsWith('cronwarden_fires_duplicate_total'));
            const count = Number(dup?.split(' ').at(-1) ?? 0);
            if (!later.has(n.replica.replicaId))
              assert.ok(
                count <= standIns.rows[0]!.n,
                `${n.replica.replicaId}: ${dup}, ${standIns.rows[0]!.n} stand-in fires, elections ${JSON.stringify(elections)}`,
              );
          }
        }
      } finally {
        await a.stop();
        await b.stop();
        for (const d of [a, b]) {
          const q = new Queue(queueName(d.namespace), { connection: { url: SHARED_REDIS_URL } });
          await q.obliterate({ force: true }).catch(() => {});
          await q.close();
        }
      }
    },
  );

  it('a second namespace pointed at a schema that holds another deployment is refused; public and drizzle are not ours to own', async () => {
    const first = `own-${randomUUID().slice(0, 6)}`;
    const schema = schemaForNamespace(first);
    await migrateDatabase(db.url, { schema });
    const replica = (namespace: string) =>
      new Replica({
        replicaId: namespace,
        namespace,
        schema,
        backend: new MemoryLeaseBackend(),
        databaseUrl: db.url,
        redisUrl: SHARED_REDIS_URL,
        jobs: [],
        worker: { enabled: false },
        logger: pino({ level: 'silent' }),
      });
    const owner = replica(first);
    await owner.start();
    await owner.stop();
    const intruder = replica(`${first}-other`);
    await assert.rejects(
      intruder.start(),
      (err: Error) => err instanceof NamespaceMismatchError && err.message.includes(`"${first}"`),
    );
    await intruder.stop();
    for (const bad of ['public', 'drizzle', 'pg_catalog', 'Upper', 'a-b', ''])
      assert.throws(() => validateSchemaName(bad), InvalidConfigError, bad);
    assert.equal(schemaForNamespace('default'), 'cronwarden');
    assert.equal(schemaForNamespace('My-Service'), 'cronwarden_my_service');
    assert.ok(schemaForNamespace('x'.repeat(64)).length <= 63);
  });

  it(
    "a 0.1.0 install (tables in public, journal in drizzle) upgrades with `cronwarden migrate`, keeping runs, fences, job state and the application's journal",
    { timeout: 60_000 },
    async () => {
      const old = await createTestDatabase({ migrate: false });
      const dir = await mkdtemp(join(tmpdir(), 'cw-010-'));
      try {
        // 0.1.0's migrations (0000-0005) applied the 0.1.0 way: drizzle's migrate(), tables in public, journal in drizzle.
        const v010 = join(dir, 'cronwarden-0.1.0');
        await mkdir(join(v010, 'meta'), { recursive: true });
        const journal = JSON.parse(await readFile(join(migrationsFolder, 'meta', '_journal.json'), 'utf8')) as {
          entries: { tag: string }[];
        };
        journal.entries = journal.entries.slice(0, 6);
        assert.equal(journal.entries.at(-1)!.tag, '0005_delivery_sweep_and_error_stack');
        for (const e of journal.entries)
          await copyFile(join(migrationsFolder, `${e.tag}.sql`), join(v010, `${e.tag}.sql`));
        await writeFile(join(v010, 'meta', '_journal.json'), JSON.stringify(journal));
        const app = join(dir, 'app');
        await applyAppMigrations(old.url, await appMigrations(app, 1));
        await applyAppMigrations(old.url, v010);
        assert.ok(await regclass(old.pool, 'public.cw_runs'));
        // What 0.1.0 replicas left: runs with attempts, fences, job state, an election, a lease, tokens drawn.
        const p = old.pool;
        const runs = await p.query<{ id: string }>(
          `INSERT INTO public.cw_runs (job, scheduled_at, leader_token, leader_id, state, claim_token, attempts, completed_attempt, enqueued_at)
         VALUES ('tick', '2026-01-01T00:00:00Z', 7, 'old-r1', 'completed', nextval('public.cw_execution_token_seq'), 1, 1, now()),
                ('tick', '2026-01-01T00:00:01Z', 7, 'old-r1', 'pending', NULL, 0, NULL, NULL) RETURNING id::text`,
        );
        await p.query(
          `INSERT INTO public.cw_run_attempts (run_id, attempt, token, worker, state) VALUES ($1, 1, 1, 'old-r2', 'completed')`,
          [runs.rows[0]!.id],
        );
        await p.query(
          `INSERT INTO public.cw_fences (resource, token) VALUES ('scheduler/cronwarden/default/scheduler', 7), ('orders', 42)`,
        );
        await p.query(
          `INSERT INTO public.cw_job_state (job, paused, last_scheduled_at) VALUES ('tick', true, '2026-01-01T00:00:01Z')`,
        );
        await p.query(
          `INSERT INTO public.cw_elections (lease_name, leader, token, backend) VALUES ('cronwarden/default/scheduler', 'old-r1', 7, 'postgres')`,
        );
        await p.query(
          `INSERT INTO public.cw_leases (name, holder, token) VALUES ('cronwarden/default/scheduler', NULL, 7)`,
        );
        const identity = (await p.query<{ id: string }>('SELECT id FROM public.cw_ledger')).rows[0]!.id;
        const tokenBefore = BigInt(
          (await p.query<{ v: string }>('SELECT last_value::text AS v FROM public.cw_execution_token_seq')).rows[0]!.v,
        );

        // The one documented command.
        const bin = fileURLToPath(new URL('../../bin/cronwarden.js', import.meta.url));
        const cli = spawn(process.execPath, ['--import', 'tsx', bin, 'migrate'], {
          env: { ...process.env, CRONWARDEN_DATABASE_URL: old.url, CRONWARDEN_NAMESPACE: '', CRONWARDEN_SCHEMA: '' },
        });
        let out = '';
        let errOut = '';
        cli.stdout.on('data', (c: Buffer) => (out += c.toString()));
        cli.stderr.on('data', (c: Buffer) => (errOut += c.toString()));
        const code = await new Promise<number | null>((resolve) => cli.once('exit', resolve));
        assert.equal(code, 0, errOut);
        assert.equal(out, 'moved the 0.1.0 ledger from public into schema "cronwarden"\nmigrations applied\n');

        const left = await p.query(
          "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relname LIKE 'cw\\_%'",
        );
        assert.deepEqual(left.rows, [], 'nothing of cronwarden left in public');
        const ledger = new Ledger(p, 'cronwarden');
        assert.equal(await ledger.identity(), identity, 'the same ledger identity (queue job ids stay valid)');
        const moved = await p.query<{ id: string; state: string }>(
          'SELECT id::text, state FROM cronwarden.cw_runs ORDER BY id',
        );
        assert.deepEqual(moved.rows, [
          { id: runs.rows[0]!.id, state: 'completed' },
          { id: runs.rows[1]!.id, state: 'pending' },
        ]);
        assert.equal((await p.query('SELECT 1 FROM cronwarden.cw_run_attempts')).rowCount, 1);
        assert.equal(await ledger.fires.fenceToken('orders'), 42n);
        assert.equal(await ledger.fires.fenceToken('scheduler/cronwarden/default/scheduler'), 7n);
        assert.deepEqual([...(await ledger.fires.pausedJobs())], ['tick']);
        assert.equal((await ledger.fires.lastFired()).get('tick')?.toISOString(), '2026-01-01T00:00:01.000Z');
        assert.equal((await p.query('SELECT 1 FROM cronwarden.cw_elections')).rowCount, 1);
        assert.equal(
          (
            await new PostgresLeaseBackend({ pool: p, schema: 'cronwarden' }).tryAcquire({
              name: 'cronwarden/default/scheduler',
              holder: 'new',
              ttlMs: 5000,
            })
          )?.token,
          8n,
          'the lease counter continues',
        );
        // Sequences moved with their tables: ids and execution tokens continue, never restart.
        const claim = await ledger.runs.claim(BigInt(runs.rows[1]!.id), 'new-worker');
        assert.equal(claim.status, 'claimed');
        assert.ok(
          claim.status === 'claimed' && claim.claim.token > tokenBefore,
          "execution tokens continue above 0.1.0's",
        );
        const next = await p.query<{ id: string }>(
          `INSERT INTO cronwarden.cw_runs (job, scheduled_at, leader_token, leader_id) VALUES ('tick', now(), 8, 'new') RETURNING id::text`,
        );
        assert.ok(BigInt(next.rows[0]!.id) > BigInt(runs.rows[1]!.id), 'run ids continue');
        await ledger.bindNamespace('default');

        // Journals: cronwarden's rows moved to its schema, the application's stay, and its next migration applies.
        assert.equal(
          (await p.query('SELECT 1 FROM cronwarden.__drizzle_migrations')).rowCount,
          readMigrationFiles({ migrationsFolder }).length,
          "0.1.0's rows, moved, and every later migration this version ships",
        );
        const appRows = await p.query<{ created_at: string }>(
          'SELECT created_at::text FROM drizzle.__drizzle_migrations',
        );
        assert.deepEqual(
          appRows.rows,
          [{ created_at: '1700000000000' }],
          "only the application's row is left in drizzle's journal",
        );
        await applyAppMigrations(old.url, await appMigrations(app, 2));
        assert.ok(await regclass(p, 'public.app_table_1'), "the application's next migration applied");
        // Idempotent: a second run moves nothing and applies nothing.
        assert.deepEqual(await migrateDatabase(old.url), { schema: 'cronwarden', applied: [], movedFromPublic: false });
      } finally {
        await old.drop();
        await rm(dir, { recursive: true, force: true });
      }
    },
  );
});
