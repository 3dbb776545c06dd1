/**
 * Shared ground for the tests that deliver runs to worker processes and count their effects: a
 * scratch database with an `effects` table and a Redis connection for the suite, and one run
 * committed the way a leader would (a stand-in leader with token 1) and handed to BullMQ.
 */
import { after, before } from 'node:test';
import { Redis } from 'ioredis';
import type pg from 'pg';
import { pino } from 'pino';
import { defineJob } from '../../src/jobs/define-job.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { BullmqDelivery } from '../../src/jobs/bullmq-delivery.js';
import { BullmqWorker } from '../../src/jobs/bullmq-worker.js';
import { RunExecutor } from '../../src/jobs/run-executor.js';
import { RunLedgerBatches } from '../../src/jobs/run-ledger-batches.js';
import type { JobContext, JobHandler, TransactionClient } from '../../src/jobs/job-context.js';
import type { FireTrigger } from '../../src/cron/fire-trigger.js';
import type { CommittedFire } from '../../src/ledger/fire-batch.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { SHARED_REDIS_URL } from '../integration/failover-scenario.js';
import { createTestDatabase, type TestDatabase } from './postgres-database.js';

/** Call inside a describe: a scratch database with `effects (run_id, attempt, token)` and a Redis client, for the whole suite. */
export function effectsSuite(): { readonly db: TestDatabase; readonly redis: Redis } {
  const env = {} as { db: TestDatabase; redis: Redis };
  before(async () => {
    env.db = await createTestDatabase();
    await env.db.pool.query(
      'CREATE TABLE effects (run_id bigint NOT NULL, attempt int NOT NULL, token bigint NOT NULL)',
    );
    env.redis = new Redis(SHARED_REDIS_URL);
  });
  after(async () => {
    await env.redis.quit();
    await env.db.drop();
  });
  return env;
}

/**
 * Commit one run of `job` as a leader with token 1 would (fenced, unique key), and confirm its
 * hand-over as the leader does once BullMQ took it: the test delivers it to a worker itself.
 */
export async function commitTestRun(
  ledger: Pick<Ledger, 'fires'>,
  job: string,
  options: { scheduledAt?: Date; trigger?: FireTrigger; fenceResource?: string } = {},
): Promise<CommittedFire> {
  const { committed } = await ledger.fires.commitFires(
    [{ job, scheduledAt: options.scheduledAt ?? new Date(), trigger: options.trigger ?? 'manual' }],
    {
      fenceResource: options.fenceResource ?? 'scheduler/test',
      token: 1n,
      replicaId: 'test',
      stillLeading: () => true,
    },
  );
  if (!committed[0]) throw new Error(`the test run of ${job} was not committed (already there?)`);
  await ledger.fires.markEnqueued([committed[0].runId]);
  return committed[0];
}

/** Write the attempt's row into `effects` (inside its ctx.transaction): what these tests count. */
export function writeEffect(
  tx: Pick<TransactionClient, 'query'>,
  ctx: Pick<JobContext, 'runId' | 'attempt' | 'fencingToken'>,
): Promise<unknown> {
  return tx.query('INSERT INTO effects (run_id, attempt, token) VALUES ($1, $2, $3)', [
    ctx.runId,
    ctx.attempt,
    ctx.fencingToken.toString(),
  ]);
}

/** How many of the runs `ids` are in `state` in the ledger. */
export async function runsInState(pool: pg.Pool, ids: readonly bigint[], state: string): Promise<number> {
  const res = await pool.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM cw_runs WHERE id = ANY($1::bigint[]) AND state = $2',
    [ids.map(String), state],
  );
  return res.rows[0]!.n;
}

/** The effects written for the runs `ids`: how many rows, and for how many distinct runs. */
export async function effectTally(pool: pg.Pool, ids: readonly bigint[]): Promise<{ n: number; runs: number }> {
  const res = await pool.query<{ n: number; runs: number }>(
    'SELECT count(*)::int AS n, count(DISTINCT run_id)::int AS runs FROM effects WHERE run_id = ANY($1::bigint[])',
    [ids.map(String)],
  );
  return res.rows[0]!;
}

/** BullMQ delivery of the worker fixtures' 'effect' job in `namespace`. */
export function effectDelivery(env: { db: TestDatabase; redis: Redis }, namespace: string) {
  const registry = effectRegistry(() => {});
  const ledger = new Ledger(env.db.pool);
  const delivery = new BullmqDelivery({ connection: env.redis, namespace, registry, ledger });
  return {
    ledger,
    delivery,
    /** Commit one run of 'effect' and hand it to BullMQ; returns its run id. */
    async deliverOne(): Promise<bigint> {
      const run = await commitTestRun(ledger, 'effect', { fenceResource: `scheduler/${namespace}` });
      await delivery.enqueue([run]);
      return run.runId;
    },
    /** Commit `n` runs of 'effect' (one per second from `from`) and hand them to BullMQ at once. */
    async deliverMany(n: number, from = new Date()): Promise<bigint[]> {
      const { committed } = await ledger.fires.commitFires(
        Array.from({ length: n }, (_, i) => ({
          job: 'effect',
          scheduledAt: new Date(from.getTime() + i * 1000),
          trigger: 'schedule' as const,
        })),
        { fenceResource: `scheduler/${namespace}`, token: 1n, replicaId: 'test', stillLeading: () => true },
      );
      await delivery.enqueue(committed);
      return committed.map((c) => c.runId);
    },
    async close(): Promise<void> {
      await delivery.queue.obliterate({ force: true }).catch(() => {});
      await delivery.close();
    },
  };
}

/** A registry of the one job these tests deliver, 'effect' (fired by hand), with `handler`. */
export function effectRegistry(handler: JobHandler): JobRegistry {
  return new JobRegistry([defineJob({ name: 'effect', schedule: '0 0 1 1 *', handler })]);
}

/**
 * A worker in this process for `registry`'s jobs on `ledger` (its calls batched as a replica's
 * are), on the shared Redis; not started.
 */
export function inProcessWorker(o: {
  namespace: string;
  registry: JobRegistry;
  ledger: Ledger;
  concurrency: number;
  replicaId?: string;
}): BullmqWorker {
  const logger = pino({ level: 'silent' });
  const executor = new RunExecutor({
    ledger: new RunLedgerBatches(o.ledger.runs),
    registry: o.registry,
    replicaId: o.replicaId ?? 'w',
    logger,
  });
  return new BullmqWorker({
    redisUrl: SHARED_REDIS_URL,
    namespace: o.namespace,
    executor,
    logger,
    concurrency: o.concurrency,
  });
}
