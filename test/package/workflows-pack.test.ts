/**
 * Workflows as a user meets them (issue 27): `npm pack` of this checkout, `npm i` of the tarball
 * and `pg` into a scratch application outside the checkout, and a jobs module written from
 * docs/guides/workflows.md alone: a workflow due every 2 s whose `extract` step fans out to 20
 * `invoice` items beside an `audit` branch, joined by `report` (a fan-in and a diamond). Every step
 * writes one row into the application's own table inside ctx.transaction (no unique key: a double
 * would show), then works 250 ms with that transaction open.
 *
 * Three replicas run the installed bin (`node node_modules/cronwarden/bin/cronwarden.js start`,
 * PostgreSQL lease, TTL 3 s) after its `migrate`. While runs are in flight the leader is killed with
 * SIGKILL while it runs a step, then a follower while it runs one (both read from the ledger: a step
 * run `running` claimed by it). The survivor runs on; the workflow is paused with the installed CLI,
 * the runs drain, the survivor gets SIGTERM. Then, from the application's table and cw_runs: every
 * workflow run completed with all 23 step runs, each step run's effect exactly once, no effect of a
 * step run that did not complete, I7 (every step started after each of its needs finished), the
 * fan-in in item order, and the step runs the kills interrupted taken over by another replica.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Redis } from 'ioredis';
import { schemaForNamespace } from '../../src/db/tables.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { LoggedProcess, packPackage, run, type Packed } from './support.js';

const REDIS_URL = process.env.CRONWARDEN_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const WORKFLOW = 'pack-billing';
const ITEMS = 20;
const CUSTOMERS = Array.from({ length: ITEMS }, (_, i) => `c${String(i).padStart(2, '0')}`);
/** What each step needs, as the module below defines it (for I7). */
const NEEDS: Record<string, string[]> = { audit: ['extract'], invoice: ['extract'], report: ['audit', 'invoice'] };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The application's own table setup, run with the `pg` it installed. */
const SETUP_JS = `import pg from 'pg';
const client = new pg.Client({ connectionString: process.env.APP_DATABASE_URL });
await client.connect();
await client.query(\`CREATE TABLE step_effects (
  workflow_run bigint NOT NULL, step text NOT NULL, item int, replica text NOT NULL,
  token bigint NOT NULL, detail jsonb, at timestamptz NOT NULL DEFAULT clock_timestamp())\`);
await client.end();
`;

/** The jobs module, from the workflows guide: defineWorkflow, .step, needs, map, ctx.transaction. */
const JOBS_JS = `import { setTimeout as sleep } from 'node:timers/promises';
import { defineWorkflow } from 'cronwarden';

const replica = process.env.CRONWARDEN_REPLICA_ID;
const customers = ${JSON.stringify(CUSTOMERS)};

// One row per step run in our own table, in the step's transaction; then a little work with it open.
async function effect(ctx, tx, detail) {
  await tx.query(
    'INSERT INTO step_effects (workflow_run, step, item, replica, token, detail) VALUES ($1, $2, $3, $4, $5, $6)',
    [ctx.workflowRunId, ctx.step, ctx.item ?? null, replica, ctx.fencingToken.toString(), JSON.stringify(detail ?? null)],
  );
  await sleep(250);
}

export const billing = defineWorkflow({ name: '${WORKFLOW}', schedule: '*/2 * * * * *' })
  .step('extract', (ctx) =>
    ctx.transaction(async (tx) => {
      await effect(ctx, tx);
      return { customers };
    }),
  )
  .step('audit', {
    needs: ['extract'],
    run: (ctx, input) =>
      ctx.transaction(async (tx) => {
        await effect(ctx, tx);
        return input.extract.customers.length;
      }),
  })
  .step('invoice', {
    needs: ['extract'],
    map: (input) => input.extract.customers,
    retries: 2,
    run: (ctx, customer) =>
      ctx.transaction(async (tx) => {
        await effect(ctx, tx, customer);
        return { customer, item: ctx.item };
      }),
  })
  .step('report', {
    needs: ['invoice', 'audit'],
    run: (ctx, input) =>
      ctx.transaction(async (tx) => {
        const order = input.invoice.map((i) => i.customer);
        await effect(ctx, tx, { order, audited: input.audit });
        return order;
      }),
  });
`;

let packed: Packed;
let app: string;

before(async () => {
  packed = await packPackage(300_000);
  // Outside this checkout, so nothing resolves to our own node_modules.
  app = mkdtempSync(join(tmpdir(), 'cronwarden-wf-app-'));
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'wf-app', private: true, type: 'module' }));
  const install = await run('npm', ['i', '--no-audit', '--no-fund', '--prefer-offline', packed.tarball, 'pg'], {
    cwd: app,
    timeoutMs: 300_000,
  });
  assert.equal(install.code, 0, `npm i: ${install.stderr}`);
  writeFileSync(join(app, 'setup.js'), SETUP_JS);
  writeFileSync(join(app, 'jobs.js'), JOBS_JS);
});

after(() => {
  if (packed) rmSync(packed.dir, { recursive: true, force: true });
  if (app) rmSync(app, { recursive: true, force: true });
});

interface StepRun {
  id: string;
  workflow_run_id: string;
  step: string;
  item: number | null;
  state: string;
  attempts: number;
  result: unknown;
}

describe('a workflow in the packed package, three replicas, kill -9 of the leader and of a worker mid-step', () => {
  it(
    'every step effect once, every workflow run settled, I7, the fan-in in item order',
    { timeout: 600_000 },
    async () => {
      const db: TestDatabase = await createTestDatabase({ migrate: false });
      const namespace = `wfp${randomUUID().slice(0, 8)}`;
      const schema = schemaForNamespace(namespace);
      const runs = `"${schema}".cw_runs`;
      const bin = join(app, 'node_modules', 'cronwarden', 'bin', 'cronwarden.js');
      const adminToken = randomBytes(24).toString('hex');
      const env = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => ({
        PATH: `${dirname(process.execPath)}:/usr/local/bin:/usr/bin:/bin`,
        HOME: process.env.HOME ?? '/tmp',
        LANG: 'C.UTF-8',
        ...extra,
      });
      const replicas: LoggedProcess[] = [];
      try {
        const migrated = await run(
          process.execPath,
          [bin, 'migrate', '--database-url', db.url, '--namespace', namespace],
          {
            cwd: app,
            env: env(),
            timeoutMs: 60_000,
          },
        );
        assert.equal(migrated.code, 0, `cronwarden migrate: ${migrated.stderr}`);
        const setup = await run(process.execPath, ['setup.js'], { cwd: app, env: env({ APP_DATABASE_URL: db.url }) });
        assert.equal(setup.code, 0, `the app's setup: ${setup.stderr}`);

        const t0 = Date.now();
        for (const id of ['r1', 'r2', 'r3']) {
          const argv = [process.execPath, bin, 'start', '--backend', 'postgres', '--database-url', db.url];
          argv.push('--redis-url', REDIS_URL, '--namespace', namespace, '--jobs', './jobs.js');
          argv.push('--admin-port', '0', '--lease-ttl-ms', '3000');
          const extra = { CRONWARDEN_REPLICA_ID: id, CRONWARDEN_ADMIN_TOKEN: adminToken };
          replicas.push(new LoggedProcess(id, argv, { cwd: app, env: env(extra) }));
        }
        const byId = (id: string) => replicas.find((r) => r.name === id)!;
        const alive = (r: LoggedProcess) => r.child.exitCode === null && r.child.signalCode === null;

        /** The lease holder, from the ledger (the postgres lease backend's row). */
        const leader = async (): Promise<string | undefined> =>
          (
            await db.pool.query<{ holder: string }>(
              `SELECT holder FROM "${schema}".cw_leases WHERE holder IS NOT NULL AND expires_at > now()`,
            )
          ).rows[0]?.holder;
        /** The step runs `replica` is in the middle of (running, claimed by it). */
        const runningOn = async (replica: string): Promise<string[]> =>
          (
            await db.pool.query<{ id: string }>(
              `SELECT id FROM ${runs} WHERE kind = 'step' AND state = 'running' AND claimed_by = $1`,
              [replica],
            )
          ).rows.map((r) => r.id);
        async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
          const deadline = Date.now() + ms;
          for (;;) {
            const value = await probe();
            if (value !== undefined) return value;
            if (Date.now() > deadline) throw new Error(`no ${what} within ${ms} ms`);
            await sleep(50);
          }
        }
        /** SIGKILL `replica` the moment it is running a step; the step runs it held. */
        async function killMidStep(replica: string): Promise<string[]> {
          const held = await until(`step running on ${replica}`, 30_000, async () => {
            const ids = await runningOn(replica);
            return ids.length > 0 ? ids : undefined;
          });
          byId(replica).child.kill('SIGKILL');
          await byId(replica).exited;
          return held;
        }

        // 1. Runs in flight: at least two workflow runs fired and steps running.
        const first = await until('leader', 60_000, leader);
        await until('two workflow runs with steps running', 60_000, async () => {
          const r = await db.pool.query<{ n: number }>(
            `SELECT count(DISTINCT workflow_run_id)::int AS n FROM ${runs} WHERE kind = 'step'`,
          );
          return (r.rows[0]?.n ?? 0) >= 2 ? true : undefined;
        });

        // 2. kill -9 the leader while it runs a step; a follower takes the lease after the TTL.
        const heldByLeader = await killMidStep(first);
        const second = await until('a new leader', 30_000, async () => {
          const now = await leader();
          return now && now !== first ? now : undefined;
        });

        // 3. kill -9 the other follower while it runs a step: one replica is left to finish everything.
        const worker = replicas.find((r) => alive(r) && r.name !== second)!.name;
        const heldByWorker = await killMidStep(worker);
        const aloneFrom = new Date();
        await sleep(8000); // the survivor alone: fires, takes over the orphans, runs on

        // 4. Pause the workflow with the installed CLI, let the runs drain, stop the survivor.
        const adminUrl = String((await byId(second).waitFor('admin HTTP listening', 1000)).adminUrl);
        const paused = await run(process.execPath, [bin, 'pause', WORKFLOW, '--reason', 'test', '--url', adminUrl], {
          cwd: app,
          env: env({ CRONWARDEN_ADMIN_TOKEN: adminToken }),
          timeoutMs: 30_000,
        });
        assert.equal(paused.code, 0, `cronwarden pause: ${paused.stdout}${paused.stderr}`);
        await until('every run settled', 90_000, async () => {
          const open = await db.pool.query(
            `SELECT 1 FROM ${runs} WHERE state IN ('pending', 'running', 'retrying') LIMIT 1`,
          );
          return open.rowCount === 0 ? true : undefined;
        }).catch(() => undefined); // the checks below say what is left
        byId(second).child.kill('SIGTERM');
        assert.deepEqual(await byId(second).exited, { code: 0, signal: null }, byId(second).stderr.slice(-2000));
        const elapsed = Date.now() - t0;

        // 5. The ledger and the application's table.
        const workflowRuns = await db.pool.query<{ id: string; state: string; error: string | null }>(
          `SELECT id, state, error FROM ${runs} WHERE job = $1 ORDER BY id`,
          [WORKFLOW],
        );
        assert.ok(workflowRuns.rowCount! >= 4, `only ${workflowRuns.rowCount} workflow runs fired`);
        // The slots after the pause are recorded skipped with its reason; every run that fired completed.
        const notDone = workflowRuns.rows.filter(
          (r) => r.state !== 'completed' && !(r.state === 'skipped' && /^job is paused/.test(r.error ?? '')),
        );
        assert.deepEqual(notDone, [], 'every workflow run completed');
        const steps = await db.pool.query<StepRun>(
          `SELECT id, workflow_run_id, step, item, state, attempts, result FROM ${runs}
         WHERE kind = 'step' ORDER BY workflow_run_id, step, item`,
        );
        const want = ['audit', 'extract', ...CUSTOMERS.map((_, i) => `invoice[${i}]`), 'report'].sort();
        for (const w of workflowRuns.rows) {
          const mine = steps.rows.filter((s) => s.workflow_run_id === w.id);
          // A slot skipped while the workflow was paused starts nothing.
          if (w.state === 'skipped') {
            assert.deepEqual(mine, [], `workflow run ${w.id} was skipped, yet made step runs`);
            continue;
          }
          const names = mine.map((s) => (s.item === null ? s.step : `${s.step}[${s.item}]`)).sort();
          assert.deepEqual(names, want, `workflow run ${w.id}: each step run made once`);
          assert.deepEqual(
            mine.filter((s) => s.state !== 'completed').map((s) => [s.step, s.item, s.state]),
            [],
            `workflow run ${w.id}: every step run completed`,
          );
          assert.deepEqual(mine.find((s) => s.step === 'report')!.result, CUSTOMERS, 'the fan-in, in item order');
        }

        // Exactly one effect per completed step run; none of a step run that did not complete.
        const effects = await db.pool.query<{ workflow_run: string; step: string; item: number | null; n: number }>(
          `SELECT workflow_run, step, item, count(*)::int AS n FROM step_effects GROUP BY 1, 2, 3`,
        );
        const key = (w: string, step: string, item: number | null) => `${w}/${step}/${item ?? ''}`;
        const doubled = effects.rows
          .filter((e) => e.n !== 1)
          .map((e) => `${key(e.workflow_run, e.step, e.item)} x${e.n}`);
        assert.deepEqual(doubled, [], 'no step effect twice');
        const completed = new Set(
          steps.rows.filter((s) => s.state === 'completed').map((s) => key(s.workflow_run_id, s.step, s.item)),
        );
        const written = new Set(effects.rows.map((e) => key(e.workflow_run, e.step, e.item)));
        assert.deepEqual(
          [...completed].filter((k) => !written.has(k)),
          [],
          'every completed step run has its effect',
        );
        assert.deepEqual(
          [...written].filter((k) => !completed.has(k)),
          [],
          'no effect of a step run that did not complete',
        );
        const orders = await db.pool.query<{ detail: { order: string[]; audited: number } }>(
          "SELECT detail FROM step_effects WHERE step = 'report'",
        );
        for (const o of orders.rows) assert.deepEqual(o.detail, { order: CUSTOMERS, audited: ITEMS });

        // I7, from cw_runs and every attempt: no step (attempt) started before each of its needs finished.
        const i7 = await db.pool.query<{ step: string; item: number | null; need: string; attempt: number }>(
          `SELECT s.step, s.item, n.step AS need, a.attempt FROM ${runs} s
         JOIN "${schema}".cw_run_attempts a ON a.run_id = s.id
         JOIN ${runs} n ON n.workflow_run_id = s.workflow_run_id
           AND n.step = ANY (CASE s.step WHEN 'audit' THEN $1::text[] WHEN 'invoice' THEN $2::text[]
                                          WHEN 'report' THEN $3::text[] ELSE '{}'::text[] END)
         WHERE s.kind = 'step' AND (n.finished_at IS NULL OR s.started_at < n.finished_at OR a.started_at < n.finished_at)`,
          [NEEDS.audit, NEEDS.invoice, NEEDS.report],
        );
        assert.deepEqual(i7.rows, [], 'I7: a step starts only after every step it needs completed');

        // The kills landed mid-step: each step run a killed replica held was finished by another one.
        const takenOver = async (ids: string[], victim: string) => {
          const r = await db.pool.query<{ id: string; by: string; attempts: number }>(
            `SELECT r.id, a.worker AS by, r.attempts FROM ${runs} r
           JOIN "${schema}".cw_run_attempts a ON a.run_id = r.id AND a.attempt = r.completed_attempt
           WHERE r.id = ANY($1::bigint[])`,
            [ids],
          );
          return r.rows.filter((x) => x.by !== victim && x.attempts >= 2).length;
        };
        const leaderSteps = await takenOver(heldByLeader, first);
        const workerSteps = await takenOver(heldByWorker, worker);
        assert.ok(leaderSteps > 0, `a step run the killed leader held was taken over (${heldByLeader.join(', ')})`);
        assert.ok(workerSteps > 0, `a step run the killed worker held was taken over (${heldByWorker.join(', ')})`);
        const tenures = await db.pool.query(`SELECT DISTINCT token FROM "${schema}".cw_elections`);
        assert.ok(tenures.rowCount! >= 2, 'a second leader tenure after the kill');
        const alone = await db.pool.query(`SELECT 1 FROM ${runs} WHERE job = $1 AND created_at > $2`, [
          WORKFLOW,
          aloneFrom,
        ]);
        assert.ok(alone.rowCount! >= 2, 'the survivor went on firing workflow runs alone');

        const total = effects.rows.reduce((n, e) => n + e.n, 0);
        process.stdout.write(
          `# ${workflowRuns.rowCount} workflow runs, ${steps.rowCount} step runs, ${total} effects, 0 doubled; ` +
            `leader ${first} killed mid-step (${leaderSteps}/${heldByLeader.length} taken over), ` +
            `worker ${worker} killed mid-step (${workerSteps}/${heldByWorker.length}); ${elapsed} ms from start\n`,
        );
      } finally {
        for (const r of replicas) await r.kill();
        await purgeRedis(namespace);
        await db.drop();
      }
    },
  );
});

/** Delete the Redis keys of `namespace` (BullMQ's queues). */
async function purgeRedis(namespace: string): Promise<void> {
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  try {
    for await (const keys of redis.scanStream({ match: `*${namespace}*`, count: 1000 }) as AsyncIterable<string[]>)
      if (keys.length > 0) await redis.del(...keys);
  } finally {
    redis.disconnect();
  }
}
