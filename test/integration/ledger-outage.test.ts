/**
 * The ledger (PostgreSQL) unreachable while a run is delivered: at the claim, inside
 * ctx.transaction, or when the outcome is recorded. Not the handler's failure: the run must be
 * delivered again later, without using up one of the job's attempts, and its effect land once.
 * The failures are real node-postgres connection errors thrown by a ledger that fails on cue.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { BackendUnavailableError } from '../../src/errors.js';
import { defineJob } from '../../src/jobs/define-job.js';
import type { JobContext } from '../../src/jobs/job-context.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { BullmqDelivery } from '../../src/jobs/bullmq-delivery.js';
import { BullmqWorker } from '../../src/jobs/bullmq-worker.js';
import { RunExecutor } from '../../src/jobs/run-executor.js';
import { Ledger, RunLedger, type Claim, type ClaimResult, type Outcome } from '../../src/ledger/ledger.js';
import type { FinishDetails } from '../../src/ledger/run-ledger.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { commitTestRun } from '../support/effect-runs.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';
import { tablesIn } from '../../src/db/tables.js';

/** What node-postgres throws when the server goes away mid-query. */
const connectionLost = () => new Error('Connection terminated unexpectedly');

/** A real ledger whose next N calls of a method fail as if PostgreSQL were unreachable. */
class FlakyLedger extends RunLedger {
  failClaims = 0;
  failTransactions = 0;
  failFinishes = 0;
  override async claim(runId: bigint, worker: string): Promise<ClaimResult> {
    if (this.failClaims > 0 && this.failClaims--) throw connectionLost();
    return super.claim(runId, worker);
  }
  override async completeInTransaction<T>(claim: Claim, fn: (tx: import('pg').PoolClient) => Promise<T>) {
    if (this.failTransactions > 0 && this.failTransactions--) throw connectionLost();
    return super.completeInTransaction(claim, fn);
  }
  override async finish(claim: Claim, outcome: Outcome, error?: unknown, details?: FinishDetails): Promise<boolean> {
    if (outcome === 'completed' && this.failFinishes > 0 && this.failFinishes--) throw connectionLost();
    return super.finish(claim, outcome, error, details);
  }
}

describe('the ledger unreachable during a delivery (real PostgreSQL, Redis)', () => {
  let db: TestDatabase;
  let ledger: FlakyLedger;
  /** The same database through the whole ledger: commits runs and names BullMQ jobs. */
  let real: Ledger;
  let executor: RunExecutor;
  let registry: JobRegistry;
  let handler: (ctx: JobContext) => Promise<unknown> = async () => {};
  let calls = 0;
  let fired = 0;

  before(async () => {
    db = await createTestDatabase();
    await db.pool.query('CREATE TABLE effects (run_id bigint NOT NULL, attempt int NOT NULL)');
    ledger = new FlakyLedger(db.pool, tablesIn(db.schema));
    real = new Ledger(db.pool);
    registry = new JobRegistry([
      defineJob({
        name: 'outage',
        schedule: '0 0 1 1 *',
        handler: (ctx) => {
          calls++;
          return handler(ctx);
        },
      }),
    ]);
    executor = new RunExecutor({ ledger, registry, replicaId: 'w', logger: pino({ level: 'silent' }) });
  });
  after(async () => {
    await db.drop();
  });

  async function fire(): Promise<bigint> {
    return (
      await commitTestRun(real, 'outage', {
        scheduledAt: new Date(Date.UTC(2031, 0, 1, 0, fired++)),
        trigger: 'schedule',
      })
    ).runId;
  }
  const state = async (runId: bigint) =>
    (
      await db.pool.query<{ state: string; attempts: number }>('SELECT state, attempts FROM cw_runs WHERE id = $1', [
        runId.toString(),
      ])
    ).rows[0]!;
  const effects = async (runId: bigint) =>
    (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM effects WHERE run_id = $1', [runId.toString()]))
      .rows[0]!.n;
  const writeEffect = async (ctx: JobContext) => {
    await ctx.transaction(async (tx) => {
      await tx.query('INSERT INTO effects VALUES ($1, $2)', [ctx.runId, ctx.attempt]);
    });
  };

  it('unreachable at the claim: a retryable error, nothing ran, and the next delivery runs it once', async () => {
    handler = writeEffect;
    calls = 0;
    const runId = await fire();
    ledger.failClaims = 1;
    await assert.rejects(
      executor.execute(runId, { finalAttempt: true }),
      (err: Error) => err instanceof BackendUnavailableError && err.retryable,
    );
    assert.equal(calls, 0, 'the handler must not run without a claim');
    assert.equal((await state(runId)).state, 'pending');
    assert.equal((await executor.execute(runId, { finalAttempt: true })).status, 'completed');
    assert.equal(await effects(runId), 1);
  });

  it('unreachable inside ctx.transaction on the last attempt: not failed, delivered again, the effect once', async () => {
    handler = writeEffect;
    const runId = await fire();
    ledger.failTransactions = 1;
    await assert.rejects(executor.execute(runId, { finalAttempt: true }), BackendUnavailableError);
    assert.equal(
      (await state(runId)).state,
      'retrying',
      'recorded as retrying, not failed, although no retry was left',
    );
    assert.equal(await effects(runId), 0);
    assert.equal((await executor.execute(runId, { finalAttempt: true })).status, 'completed');
    assert.equal(await effects(runId), 1);
  });

  it('a short outage while recording the outcome is waited out: the handler runs once', async () => {
    handler = async () => {};
    calls = 0;
    const runId = await fire();
    ledger.failFinishes = 2;
    assert.equal((await executor.execute(runId, { finalAttempt: true })).status, 'completed');
    assert.equal(calls, 1);
    assert.deepEqual(await state(runId), { state: 'completed', attempts: 1 });
  });

  it(
    'through BullMQ: a delivery that finds the ledger unreachable is delayed, not failed, and uses up no attempt',
    { timeout: 30_000 },
    async () => {
      handler = writeEffect;
      const namespace = `outage${randomUUID().slice(0, 8)}`;
      const connection = new Redis(SHARED_REDIS_URL, { maxRetriesPerRequest: null });
      const delivery = new BullmqDelivery({ connection, namespace, registry, ledger: real });
      const worker = new BullmqWorker({
        redisUrl: SHARED_REDIS_URL,
        namespace,
        executor,
        logger: pino({ level: 'silent' }),
        lockDurationMs: 5000,
      });
      try {
        await worker.start();
        const runId = await fire();
        ledger.failClaims = 2; // two deliveries find the ledger down; retries = 0, so a failure would be final
        const started = Date.now();
        await delivery.enqueue([{ runId, job: 'outage', scheduledAt: new Date() }]);
        while ((await state(runId)).state !== 'completed' && Date.now() - started < 20_000)
          await new Promise((r) => setTimeout(r, 100));
        assert.equal((await state(runId)).state, 'completed');
        assert.equal(ledger.failClaims, 0, 'both failing deliveries happened');
        assert.equal(await effects(runId), 1);
        // Tried again here after 0.5 s, then 1 s: delayed, not failed, and no retry used up.
        assert.ok(Date.now() - started >= 1400, `completed after ${Date.now() - started} ms`);
        assert.deepEqual(await state(runId), { state: 'completed', attempts: 1 });
        const job = (await delivery.queue.getJobs(['completed']))[0];
        assert.ok(job, 'the BullMQ job completed');
        assert.equal(job.attemptsMade, 1, "the queue saw one delivery: the delays were the worker's");
      } finally {
        await worker.close(1000);
        await delivery.queue.obliterate({ force: true }).catch(() => {});
        await delivery.close();
        await connection.quit();
      }
    },
  );
});
