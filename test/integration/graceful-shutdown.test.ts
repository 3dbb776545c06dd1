/**
 * Graceful shutdown of a worker during a long run (a rolling deploy): the run is recorded as
 * interrupted, not failed, even with retries = 0; it goes straight back to the queue, another
 * worker completes it with a newer token, and the effect lands once. A handler that ignores its
 * signal does not keep the worker from closing. Real PostgreSQL and Redis, child processes.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { bullmqJobId, redeliveryJobId } from '../../src/jobs/bullmq-names.js';
import { EventedChild } from '../support/evented-child.js';
import { effectDelivery, effectsSuite } from '../support/effect-runs.js';
import type { EffectMode } from '../fixtures/effect-job.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const fixture = fileURLToPath(new URL('../fixtures/worker-process.ts', import.meta.url));
/**
 * Long enough that neither BullMQ's stalled-job recovery nor the liveness window (the fixture's
 * lock) can be what re-delivers the run in these tests: the hand-back is.
 */
const LOCK_MS = 30_000;

describe('graceful shutdown during a run (real PostgreSQL, Redis, child processes)', () => {
  const env = effectsSuite();

  /**
   * Workers A (`mode`) and B (plain) both run; one run is fired and A takes it (B is started once
   * A is inside the handler). SIGTERM A with `graceMs`, wait for its exit, then for B to commit.
   */
  async function rollingDeploy(mode: EffectMode, graceMs: number, shutdownMarginMs: number) {
    const namespace = `gs${randomUUID().slice(0, 8)}`;
    const db = env.db;
    const { ledger, delivery, deliverOne, close } = effectDelivery(env, namespace);
    const base = {
      databaseUrl: db.url,
      redisUrl: SHARED_REDIS_URL,
      namespace,
      lockDurationMs: LOCK_MS,
      job: 'effect',
      graceMs,
      shutdownMarginMs,
    };
    const a = EventedChild.fixture('A', fixture, { ...base, mode, name: 'A' });
    let b: EventedChild | undefined;
    try {
      await a.waitFor((e) => e.event === 'ready', 20_000);
      const runId = await deliverOne();
      await a.waitFor((e) => e.event === 'inside' && e.attempt === 1, 20_000);
      b = EventedChild.fixture('B', fixture, { ...base, mode: 'plain', name: 'B' });
      await b.waitFor((e) => e.event === 'ready', 20_000);

      const sigterm = Date.now();
      a.signal('SIGTERM');
      const code = await a.exited;
      const exitMs = Date.now() - sigterm;
      const closed = await a.waitFor((e) => e.event === 'closed', 0);
      const attempt2 = await b.waitFor((e) => e.event === 'committed' && e.attempt === 2, 20_000);
      const pickupMs = Date.now() - sigterm;

      // The first delivery was done once A claimed the run; A's hand-back is a delivery of its own.
      const jobId = bullmqJobId(await ledger.identity(), runId);
      const handBackId = redeliveryJobId(await ledger.identity(), runId, 1);
      const deadline = Date.now() + 10_000;
      while ((await delivery.queue.getJobState(handBackId)) !== 'completed' && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 100));
      const job = await delivery.queue.getJob(jobId);
      const effects = await db.pool.query<{ attempt: number }>('SELECT attempt FROM effects WHERE run_id = $1', [
        runId.toString(),
      ]);
      const run = await db.pool.query<{
        state: string;
        attempts: number;
        completed_attempt: number | null;
        failures: number;
      }>('SELECT state, attempts, completed_attempt, failures FROM cw_runs WHERE id = $1', [runId.toString()]);
      const attempts = await db.pool.query<{ attempt: number; worker: string; state: string; error: string | null }>(
        'SELECT attempt, worker, state, error FROM cw_run_attempts WHERE run_id = $1 ORDER BY attempt',
        [runId.toString()],
      );
      return {
        code,
        exitMs,
        closeMs: Number(closed.closeMs),
        pickupMs,
        attempt2,
        a,
        job: {
          state: await delivery.queue.getJobState(jobId),
          attemptsMade: job?.attemptsMade,
          handBack: await delivery.queue.getJobState(handBackId),
        },
        effects: effects.rows,
        run: run.rows[0]!,
        attempts: attempts.rows,
      };
    } finally {
      await a.kill();
      await b?.kill();
      await close();
    }
  }

  it(
    'SIGTERM during a long run (retries = 0): interrupted, not failed; another worker completes it at once, effect once',
    { timeout: 90_000 },
    async () => {
      const graceMs = 500;
      const r = await rollingDeploy('cooperative', graceMs, 1000);
      assert.equal(r.code, 0, 'the worker exits 0');
      assert.ok(
        r.a.events.some((e) => e.event === 'aborted' && e.attempt === 1),
        'the handler saw its signal abort',
      );
      assert.ok(r.closeMs >= graceMs - 50, `close waited for the grace period (${r.closeMs} ms)`);
      assert.ok(r.closeMs < graceMs + 1000, `a handler that stops on its signal needs no margin (${r.closeMs} ms)`);
      assert.ok(r.exitMs < graceMs + 5000, `the process exited in ${r.exitMs} ms`);
      // The run was handed back, not left for the stalled check (lock 30 s).
      assert.ok(r.pickupMs < 10_000, `picked up ${r.pickupMs} ms after SIGTERM`);
      assert.deepEqual(r.effects, [{ attempt: 2 }], 'the interrupted attempt rolled back; the effect landed once');
      assert.equal(r.run.state, 'completed');
      assert.equal(r.run.completed_attempt, 2);
      assert.equal(r.run.attempts, 2);
      assert.deepEqual(
        r.attempts.map(({ attempt, worker, state }) => ({ attempt, worker, state })),
        [
          { attempt: 1, worker: 'A', state: 'retrying' },
          { attempt: 2, worker: 'B', state: 'completed' },
        ],
      );
      assert.match(r.attempts[0]!.error ?? '', /^interrupted: replica shutting down/);
      assert.ok(!r.attempts.some((a) => a.state === 'failed'));
      assert.equal(r.run.failures, 0, 'the interruption used up none of the retries');
      assert.deepEqual(
        [r.job.state, r.job.attemptsMade, r.job.handBack],
        ['completed', 1, 'completed'],
        'the first delivery ended once A claimed the run; A handed it back in a delivery of its own, which B took',
      );
    },
  );

  it(
    'a handler that ignores its signal does not keep the worker from exiting; the run is handed on',
    { timeout: 90_000 },
    async () => {
      const graceMs = 500;
      const marginMs = 500;
      const r = await rollingDeploy('ignore-signal', graceMs, marginMs);
      assert.equal(r.code, 0, 'the worker exits 0');
      assert.ok(
        r.a.events.some((e) => e.event === 'ignored-abort'),
        'the handler was told and ignored it',
      );
      assert.ok(r.closeMs >= graceMs + marginMs - 50, `abandoned only after grace + margin (${r.closeMs} ms)`);
      assert.ok(r.closeMs < graceMs + 2 * marginMs + 1000, `close is bounded (${r.closeMs} ms)`);
      assert.ok(r.exitMs < graceMs + 2 * marginMs + 6000, `the process exited in ${r.exitMs} ms`);
      assert.ok(r.pickupMs < 12_000, `picked up ${r.pickupMs} ms after SIGTERM`);
      assert.deepEqual(
        r.effects,
        [{ attempt: 2 }],
        "the abandoned attempt's uncommitted write is gone; the effect landed once",
      );
      assert.equal(r.run.state, 'completed');
      assert.equal(r.run.completed_attempt, 2);
      assert.deepEqual(
        r.attempts.map(({ attempt, state }) => ({ attempt, state })),
        [
          { attempt: 1, state: 'retrying' },
          { attempt: 2, state: 'completed' },
        ],
      );
      assert.match(r.attempts[0]!.error ?? '', /^interrupted: replica shutting down.*abandoned/);
      assert.equal(r.run.failures, 0, 'the interruption used up none of the retries');
      assert.deepEqual([r.job.state, r.job.handBack], ['completed', 'completed']);
    },
  );
});
