/**
 * Exactly-once effects (ctx.transaction): a worker killed after its commit (and the run delivered
 * again), killed before it (another worker takes the run over once the killed one stops beating),
 * and paused past its liveness window while another worker completes the run. In every case the effect
 * table ends with exactly one row for the run.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { runDetail } from '../../src/ledger/run-reads.js';
import { tablesIn } from '../../src/db/tables.js';
import { EventedChild } from '../support/evented-child.js';
import { parseExposition } from '../support/exposition.js';
import { effectDelivery, effectsSuite } from '../support/effect-runs.js';
import type { EffectMode } from '../fixtures/effect-job.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const fixture = fileURLToPath(new URL('../fixtures/worker-process.ts', import.meta.url));

describe('exactly-once effects with ctx.transaction (real PostgreSQL, Redis, child processes)', () => {
  const env = effectsSuite();

  /** Commit one run, start worker A in `mode`, act on it, then start worker B to finish the run. */
  async function scenario(
    mode: EffectMode,
    act: (a: EventedChild) => Promise<void>,
    settle: (
      b: EventedChild,
      a: EventedChild,
      runId: bigint,
      delivery: ReturnType<typeof effectDelivery>,
    ) => Promise<void>,
  ) {
    const namespace = `fx${randomUUID().slice(0, 8)}`;
    const db = env.db;
    const delivery = effectDelivery(env, namespace);
    const base = { databaseUrl: db.url, redisUrl: SHARED_REDIS_URL, namespace, lockDurationMs: 1000, job: 'effect' };
    // Replica ids unique to the scenario, so per-replica metrics count only this scenario's attempts.
    const names = { a: `A-${namespace}`, b: `B-${namespace}` };
    const a = EventedChild.fixture('A', fixture, { ...base, mode, name: names.a });
    let b: EventedChild | undefined;
    try {
      await a.waitFor((e) => e.event === 'ready', 20_000);
      const runId = await delivery.deliverOne();
      await act(a);
      b = EventedChild.fixture('B', fixture, { ...base, mode: 'plain', name: names.b });
      await settle(b, a, runId, delivery);
      const effects = await db.pool.query<{ attempt: number }>('SELECT attempt FROM effects WHERE run_id = $1', [
        runId.toString(),
      ]);
      const run = await db.pool.query<{
        state: string;
        attempts: number;
        completed_attempt: number | null;
        skipped_attempts: number;
      }>('SELECT state, attempts, completed_attempt, skipped_attempts FROM cw_runs WHERE id = $1', [runId.toString()]);
      const attempts = await db.pool.query<{ attempt: number; state: string }>(
        'SELECT attempt, state FROM cw_run_attempts WHERE run_id = $1 ORDER BY attempt',
        [runId.toString()],
      );
      return { runId, namespace, names, effects: effects.rows, run: run.rows[0]!, attempts: attempts.rows };
    } finally {
      for (const c of [a, b]) {
        if (!c) continue;
        c.signal('SIGCONT');
        c.signal('SIGKILL');
        await c.exited;
      }
      await delivery.close();
    }
  }

  async function waitForRow(
    q: string,
    v: unknown[],
    ok: (row: Record<string, unknown> | undefined) => boolean,
    ms = 20_000,
  ) {
    const deadline = Date.now() + ms;
    for (;;) {
      const row = (await env.db.pool.query(q, v)).rows[0] as Record<string, unknown> | undefined;
      if (ok(row)) return row;
      if (Date.now() > deadline) throw new Error(`timed out waiting on: ${q} (last ${JSON.stringify(row)})`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Worker `child`'s run-attempt metrics of job "effect", by outcome (asked for with SIGUSR2). */
  async function attemptMetrics(child: EventedChild): Promise<Map<string, number>> {
    const since = child.events.length;
    child.signal('SIGUSR2');
    const { text } = (await child.waitFor((e) => e.event === 'metrics', 10_000, since)) as unknown as { text: string };
    const byOutcome = new Map<string, number>();
    for (const { name, labels, value } of parseExposition(text)) {
      if (name !== 'cronwarden_run_attempts_total' || labels.job !== 'effect') continue;
      byOutcome.set(labels.outcome!, (byOutcome.get(labels.outcome!) ?? 0) + value);
    }
    return byOutcome;
  }

  it(
    'killed with SIGKILL right after its transaction committed: a re-delivery of the run is skipped',
    { timeout: 60_000 },
    async () => {
      let metricsOfB = new Map<string, number>();
      const { runId, names, effects, run, attempts } = await scenario(
        'after-commit',
        async (a) => {
          await a.waitFor((e) => e.event === 'committed' && e.attempt === 1, 20_000);
          a.signal('SIGKILL');
        },
        async (b, _a, runId, { delivery }) => {
          // The run is settled, so nothing hands it out again by itself: deliver it again, as a
          // queue that lost its record of the delivery (or the sweep) would.
          await b.waitFor((e) => e.event === 'ready', 20_000);
          await delivery.redeliver([{ runId, job: 'effect', scheduledAt: new Date() }]);
          await waitForRow(
            'SELECT skipped_attempts FROM cw_runs WHERE id = $1',
            [runId.toString()],
            (r) => Number(r?.skipped_attempts) >= 1,
          );
          // B counts a skipped attempt once its delivery is over, just after the ledger records it.
          const deadline = Date.now() + 10_000;
          do metricsOfB = await attemptMetrics(b);
          while (!metricsOfB.get('skipped') && Date.now() < deadline);
        },
      );
      assert.deepEqual(effects, [{ attempt: 1 }]);
      assert.equal(run.state, 'completed');
      assert.equal(run.completed_attempt, 1);
      assert.ok(run.skipped_attempts >= 1, 'the re-delivery is recorded as a skipped attempt');
      assert.deepEqual(attempts[0], { attempt: 1, state: 'completed' });
      assert.ok(
        attempts.slice(1).length >= 1 && attempts.slice(1).every((a) => a.state === 'skipped'),
        JSON.stringify(attempts),
      );

      // Issue 6: the admin view shows the attempts, which one completed, and the skipped re-deliveries.
      const view = await runDetail(env.db.pool, tablesIn(env.db.schema), runId);
      assert.ok(view, 'the run is found');
      assert.equal(view.state, 'completed');
      assert.equal(view.completedAttempt, 1);
      assert.ok(view.skippedAttempts >= 1, `skippedAttempts ${view.skippedAttempts}`);
      assert.equal(view.attempts.length, 1 + view.skippedAttempts);
      assert.deepEqual(
        view.attempts.slice(0, 2).map((a) => ({ attempt: a.attempt, worker: a.worker, state: a.state })),
        [
          { attempt: 1, worker: names.a, state: 'completed' },
          { attempt: 2, worker: names.b, state: 'skipped' },
        ],
      );
      assert.ok(
        view.attempts.slice(1).every((a) => a.state === 'skipped' && a.error?.startsWith('run already completed')),
        JSON.stringify(view.attempts),
      );
      // ... and so do the metrics of the live replica that executed them (A's died with it): B's
      // skipped deliveries, none completed, each one the ledger recorded (a later one: not yet seen).
      const skipped = metricsOfB.get('skipped') ?? 0;
      assert.ok(skipped >= 1 && skipped <= view.skippedAttempts, JSON.stringify([...metricsOfB]));
      assert.deepEqual([...metricsOfB.keys()], ['skipped']);
    },
  );

  it(
    'killed inside the handler before its commit: the re-delivered attempt commits once',
    { timeout: 60_000 },
    async () => {
      const { effects, run } = await scenario(
        'before-commit',
        async (a) => {
          await a.waitFor((e) => e.event === 'inside' && e.attempt === 1, 20_000);
          a.signal('SIGKILL');
        },
        async (b) => {
          await b.waitFor((e) => e.event === 'committed' && e.attempt === 2, 30_000);
        },
      );
      assert.deepEqual(effects, [{ attempt: 2 }], 'nothing of the killed attempt is visible');
      assert.equal(run.state, 'completed');
      assert.equal(run.completed_attempt, 2);
    },
  );

  it(
    'paused past its liveness window while another worker completes the run, then resumed: its commit is refused',
    { timeout: 60_000 },
    async () => {
      const { effects, run } = await scenario(
        'pause-in-tx',
        async (a) => {
          await a.waitFor((e) => e.event === 'inside' && e.attempt === 1, 20_000);
          a.signal('SIGSTOP');
        },
        async (b, a) => {
          await b.waitFor((e) => e.event === 'committed' && e.attempt === 2, 30_000);
          a.signal('SIGCONT');
          await a.waitFor((e) => e.event === 'refused' && e.attempt === 1, 20_000);
        },
      );
      assert.deepEqual(effects, [{ attempt: 2 }], 'the paused attempt rolled back');
      assert.equal(run.state, 'completed');
      assert.equal(run.completed_attempt, 2);
    },
  );
});
