/**
 * The ledger is the truth for delivery (DESIGN "The ledger is the truth, the queue is delivery"):
 * runs BullMQ lost after the hand-over are handed over again by the leader's sweep and settle
 * once each; a run the queue failed without an outcome in the ledger is settled with the reason;
 * a handler error the database could not store once (U+0000) no longer leaves a run running.
 * Real PostgreSQL and Redis; the queue's loss is made by removing its jobs (no shared FLUSHALL).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { BullmqWorker } from '../../src/jobs/bullmq-worker.js';
import { queueName } from '../../src/jobs/bullmq-names.js';
import { defineJob } from '../../src/jobs/define-job.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { RunExecutor } from '../../src/jobs/run-executor.js';
import { BullmqDelivery } from '../../src/jobs/bullmq-delivery.js';
import { Ledger, type Claim } from '../../src/ledger/ledger.js';
import { DeliverySweeper } from '../../src/scheduler/chores/delivery-sweeper.js';
import { commitTestRun, effectsSuite } from '../support/effect-runs.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const logger = pino({ level: 'silent' });

describe('re-delivery from the ledger (real PostgreSQL, Redis, BullMQ)', () => {
  const env = effectsSuite();
  let ledger: Ledger;
  let namespace: string;
  let delivery: BullmqDelivery;
  let sweeper: DeliverySweeper;
  let slot = 0;
  const registry = new JobRegistry([
    defineJob({
      name: 'effect',
      schedule: '0 0 1 1 *',
      handler: async (ctx) => {
        await ctx.transaction((tx) =>
          tx.query('INSERT INTO effects (run_id, attempt, token) VALUES ($1, $2, $3)', [
            ctx.runId,
            ctx.attempt,
            ctx.fencingToken.toString(),
          ]),
        );
      },
    }),
    defineJob({
      name: 'nul',
      schedule: '0 0 1 1 *',
      overlap: 'skip',
      handler: () => Promise.reject(new Error('x\u0000' + 'y'.repeat(1_000_000))),
    }),
  ]);

  before(() => {
    ledger = new Ledger(env.db.pool);
  });
  const deliveries: BullmqDelivery[] = [];
  const setUp = () => {
    namespace = `rd${randomUUID().slice(0, 8)}`;
    delivery = new BullmqDelivery({ connection: env.redis, namespace, registry, ledger });
    deliveries.push(delivery);
    sweeper = new DeliverySweeper({ ledger: ledger.fires, delivery, logger, checkAfterMs: 0 });
  };
  after(async () => {
    for (const d of deliveries) {
      await d.queue.obliterate({ force: true }).catch(() => {});
      await d.close();
    }
  });

  async function handOver(job: string, n: number): Promise<bigint[]> {
    const ids: bigint[] = [];
    for (let i = 0; i < n; i++) {
      const run = await commitTestRun(ledger, job, {
        scheduledAt: new Date(Date.UTC(2032, 0, 1, 0, slot++)),
        trigger: 'schedule',
      });
      await delivery.enqueue([run]);
      await ledger.fires.markEnqueued([run.runId]);
      ids.push(run.runId);
    }
    return ids;
  }
  const states = async (ids: bigint[]) =>
    (
      await env.db.pool.query<{ state: string }>('SELECT state FROM cw_runs WHERE id = ANY($1::bigint[]) ORDER BY id', [
        ids.map(String),
      ])
    ).rows.map((r) => r.state);

  it(
    'runs the queue lost after the hand-over are handed over again, and each writes its effect once',
    { timeout: 30_000 },
    async () => {
      setUp();
      const ids = await handOver('effect', 5);
      await delivery.queue.obliterate({ force: true }); // what a restart without persistence or a flush leaves
      assert.deepEqual(
        await delivery.inspect(ids.map((runId) => ({ runId, job: 'effect', scheduledAt: new Date() }))),
        ids.map(() => ({ kind: 'missing' })),
      );
      assert.deepEqual(await sweeper.sweepOnce(), { checked: 5, redelivered: 5, settled: 0 });
      // Back in the queue now: a second sweep finds them there and hands nothing over again.
      assert.deepEqual(await sweeper.sweepOnce(), { checked: 5, redelivered: 0, settled: 0 });
      const executor = new RunExecutor({ ledger: ledger.runs, registry, replicaId: 'w', logger });
      const worker = new BullmqWorker({ redisUrl: SHARED_REDIS_URL, namespace, executor, logger });
      await worker.start();
      try {
        const deadline = Date.now() + 20_000;
        while ((await states(ids)).some((s) => s !== 'completed') && Date.now() < deadline)
          await new Promise((r) => setTimeout(r, 100));
      } finally {
        await worker.close(1000);
      }
      assert.deepEqual(
        await states(ids),
        ids.map(() => 'completed'),
      );
      const effects = await env.db.pool.query<{ run_id: string; n: number }>(
        'SELECT run_id, count(*)::int AS n FROM effects WHERE run_id = ANY($1::bigint[]) GROUP BY run_id',
        [ids.map(String)],
      );
      assert.equal(effects.rows.length, 5);
      assert.ok(
        effects.rows.every((r) => r.n === 1),
        'one effect per run',
      );
      assert.deepEqual(
        await sweeper.sweepOnce(),
        { checked: 0, redelivered: 0, settled: 0 },
        'nothing active is left to look at',
      );
    },
  );

  it(
    "a run the queue failed while the ledger never heard its outcome is settled failed, with the queue's reason",
    { timeout: 30_000 },
    async () => {
      setUp();
      const [runId] = await handOver('effect', 1);
      const claimed = await ledger.runs.claim(runId!, 'lost-worker'); // claimed, then its outcome never recorded
      assert.equal(claimed.status, 'claimed');
      const connection = new Redis(SHARED_REDIS_URL, { maxRetriesPerRequest: null });
      const raw = new Worker(
        queueName(namespace),
        async () => Promise.reject(new Error('worker crashed while recording')),
        { connection },
      );
      try {
        const deadline = Date.now() + 10_000;
        while ((await delivery.queue.getFailedCount()) === 0 && Date.now() < deadline)
          await new Promise((r) => setTimeout(r, 50));
      } finally {
        await raw.close();
        await connection.quit();
      }
      assert.deepEqual(await sweeper.sweepOnce(), { checked: 1, redelivered: 0, settled: 1 });
      const row = (
        await env.db.pool.query<{ state: string; error: string }>('SELECT state, error FROM cw_runs WHERE id = $1', [
          runId!.toString(),
        ])
      ).rows[0]!;
      assert.equal(row.state, 'failed');
      assert.match(row.error, /worker crashed while recording/);
      // A newer claim since the sweep read it would have kept the run as it was.
      const stale = {
        runId: runId!,
        job: 'effect',
        scheduledAt: new Date(),
        state: 'running',
        claimToken: (claimed as { claim: Claim }).claim.token,
      };
      assert.equal(await ledger.fires.failUnrecorded(stale, 'again'), false, 'a settled run is not settled twice');
    },
  );

  it(
    'a handler error with U+0000 and a megabyte of text fails the run for good: nothing stays running, overlap "skip" fires again',
    { timeout: 30_000 },
    async () => {
      setUp();
      const run = await commitTestRun(ledger, 'nul', {
        scheduledAt: new Date(Date.UTC(2032, 5, 1)),
        trigger: 'schedule',
      });
      const executor = new RunExecutor({ ledger: ledger.runs, registry, replicaId: 'w', logger });
      await assert.rejects(executor.execute(run.runId, { finalAttempt: true }), /^Error: x/);
      assert.deepEqual(await states([run.runId]), ['failed']);
      assert.equal(
        (await ledger.fires.activeJobs(['nul'])).size,
        0,
        'no active run left to make overlap "skip" skip every later fire',
      );
    },
  );
});
