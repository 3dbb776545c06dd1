/**
 * The ledger is the truth for delivery (DESIGN "The ledger is the truth, the queue is delivery"):
 * runs BullMQ lost after the hand-over are handed over again by the leader's sweep and settle
 * once each; a run whose worker died holding it is taken over by a live worker, not the sweep;
 * a handler error the database could not store once (U+0000) no longer leaves a run running.
 * Real PostgreSQL and Redis; the queue's loss is made by removing its jobs (no shared FLUSHALL).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { BullmqWorker } from '../../src/jobs/bullmq-worker.js';
import { defineJob } from '../../src/jobs/define-job.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { RunExecutor } from '../../src/jobs/run-executor.js';
import { BullmqDelivery } from '../../src/jobs/bullmq-delivery.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { DeliverySweeper } from '../../src/scheduler/chores/delivery-sweeper.js';
import { commitTestRun, effectsSuite, writeEffect } from '../support/effect-runs.js';
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
        await ctx.transaction((tx) => writeEffect(tx, ctx));
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
      assert.deepEqual(await sweeper.sweepOnce(), { checked: 5, redelivered: 5 });
      // Back in the queue now: a second sweep finds them there and hands nothing over again.
      assert.deepEqual(await sweeper.sweepOnce(), { checked: 5, redelivered: 0 });
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
      assert.deepEqual(await sweeper.sweepOnce(), { checked: 0, redelivered: 0 }, 'nothing active is left to look at');
    },
  );

  it(
    'a run claimed by a worker that stopped beating before it recorded anything is taken over by a live worker; the sweep leaves it alone',
    { timeout: 30_000 },
    async () => {
      setUp();
      const [runId] = await handOver('effect', 1);
      const lost = await ledger.runs.claim(runId!, 'lost-worker'); // claimed, then the worker died: no beat, no outcome
      assert.equal(lost.status, 'claimed');
      await delivery.queue.obliterate({ force: true }); // its delivery is long done
      assert.deepEqual(await sweeper.sweepOnce(), { checked: 0, redelivered: 0 }, "a running run is its worker's");
      const runs = new Ledger(env.db.pool).runs;
      runs.claimerLiveWithinMs = 500;
      const executor = new RunExecutor({ ledger: runs, registry, replicaId: `live-${namespace}`, logger });
      const worker = new BullmqWorker({ redisUrl: SHARED_REDIS_URL, namespace, executor, logger, liveness: runs });
      await worker.start();
      try {
        const deadline = Date.now() + 20_000;
        while ((await states([runId!]))[0] !== 'completed' && Date.now() < deadline)
          await new Promise((r) => setTimeout(r, 50));
      } finally {
        await worker.close(1000);
      }
      assert.deepEqual(await states([runId!]), ['completed']);
      const effects = await env.db.pool.query<{ attempt: number }>('SELECT attempt FROM effects WHERE run_id = $1', [
        runId!.toString(),
      ]);
      assert.deepEqual(effects.rows, [{ attempt: 2 }], 'the live worker wrote the effect, once');
      const attempts = await env.db.pool.query<{
        attempt: number;
        worker: string;
        state: string;
        error: string | null;
      }>('SELECT attempt, worker, state, error FROM cw_run_attempts WHERE run_id = $1 ORDER BY attempt', [
        runId!.toString(),
      ]);
      assert.deepEqual(
        attempts.rows.map((a) => [a.attempt, a.worker, a.state]),
        [
          [1, 'lost-worker', 'stale'],
          [2, `live-${namespace}`, 'completed'],
        ],
      );
      assert.equal(
        attempts.rows[0]!.error,
        `worker lost-worker stopped beating; the run was handed to live-${namespace}`,
      );
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
