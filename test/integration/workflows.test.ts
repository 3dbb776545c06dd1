/**
 * Workflows end to end on one replica (real PostgreSQL ledger, real Redis, in-memory lease): a fired
 * workflow run starts its steps; a fan-out of one run per item, a fan-in of their results in item
 * order, a diamond whose join is made once; each step's effect once, written in ctx.transaction with
 * its completion; I7 (no step starts before its needs completed) read from the ledger.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { defineWorkflow } from '../../src/jobs/define-workflow.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import { ACTIVE_SQL } from '../../src/ledger/run-states.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';
import { parseExposition, sampleValue } from '../support/exposition.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface StepRow {
  id: string;
  attempts: number;
  error: string | null;
  step: string;
  item: number | null;
  state: string;
  result: unknown;
  started_at: Date;
  finished_at: Date;
}

describe('workflows on one replica', { timeout: 120_000 }, () => {
  let db: TestDatabase;
  let replica: Replica;

  const billing = defineWorkflow({ name: 'billing', schedule: '0 0 1 1 *' })
    .step('extract', async (ctx) => {
      await ctx.transaction((tx) =>
        tx.query("INSERT INTO wf_effects (run, what) VALUES ($1, 'extract')", [ctx.workflowRunId]),
      );
      return { customers: ['ann', 'bob', 'cy', 'dee', 'eve'] };
    })
    .step('invoice', {
      needs: ['extract'],
      map: (input) => input.extract.customers,
      run: async (ctx, customer) =>
        ctx.transaction(async (tx) => {
          await tx.query('INSERT INTO wf_effects (run, what) VALUES ($1, $2)', [
            ctx.workflowRunId,
            `invoice ${customer}`,
          ]);
          return { customer, total: customer.length * 10 };
        }),
    })
    .step('report', {
      needs: ['invoice'],
      run: async (ctx, input) => {
        const totals = input.invoice.map((i) => `${i.customer}:${i.total}`).join(',');
        await ctx.transaction((tx) =>
          tx.query('INSERT INTO wf_effects (run, what) VALUES ($1, $2)', [ctx.workflowRunId, `report ${totals}`]),
        );
        return totals;
      },
    });

  const diamond = defineWorkflow({ name: 'diamond', schedule: '0 0 1 1 *' })
    .step('a', () => 1)
    .step('b', { needs: ['a'], run: async (_ctx, i) => i.a + 1 })
    .step('c', { needs: ['a'], run: async (_ctx, i) => i.a + 2 })
    .step('d', {
      needs: ['b', 'c'],
      run: async (ctx, i) => {
        await ctx.transaction((tx) =>
          tx.query("INSERT INTO wf_effects (run, what) VALUES ($1, 'd')", [ctx.workflowRunId]),
        );
        return i.b + i.c;
      },
    });

  let bFixed = false;
  const flaky = defineWorkflow({ name: 'flaky', schedule: '0 0 1 1 *' })
    .step('a', (ctx) =>
      ctx.transaction(async (tx) => {
        await tx.query("INSERT INTO wf_effects (run, what) VALUES ($1, 'a')", [ctx.workflowRunId]);
        return 'a';
      }),
    )
    .step('b', {
      needs: ['a'],
      retries: 1,
      backoff: { type: 'fixed', delayMs: 10 },
      run: () => {
        if (!bFixed) throw new Error('b is broken');
        return 'b';
      },
    })
    .step('c', { needs: ['b'], run: (_ctx, i) => `${i.b}c` });

  const slow = defineWorkflow({ name: 'slow', schedule: '0 0 1 1 *' })
    .step('a', (ctx) =>
      ctx.transaction(async (tx) => {
        await tx.query("INSERT INTO wf_effects (run, what) VALUES ($1, 'slow a')", [ctx.workflowRunId]);
        // Wakes when told to stop, and returns as if done: its commit must be refused.
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, 30_000);
          ctx.signal.addEventListener('abort', () => {
            clearTimeout(timer);
            resolve(undefined);
          });
        });
        return 'a';
      }),
    )
    .step('b', { needs: ['a'], run: () => 'b' });

  const approval = defineWorkflow({ name: 'approval', schedule: '0 0 1 1 *' })
    .step('prepare', () => ({ amount: 42 }))
    .step('approve', {
      needs: ['prepare'],
      waitFor: { signal: 'approved', timeoutMs: 60_000 },
      run: (ctx, i) => ({ amount: i.prepare.amount, by: ctx.received?.timedOut ? null : ctx.received?.data }),
    });

  const nudge = defineWorkflow({ name: 'nudge', schedule: '0 0 1 1 *' })
    .step('ask', () => 'asked')
    .step('go', {
      needs: ['ask'],
      waitFor: { signal: 'answer', timeoutMs: 1500, onTimeout: 'continue' },
      run: (ctx) => (ctx.received?.timedOut ? 'no answer' : 'answered'),
    })
    .step('later', { needs: ['go'], afterMs: 1500, run: () => 'later' });

  const wide = defineWorkflow({ name: 'wide', schedule: '0 0 1 1 *' })
    .step('list', () => 10_001)
    .step('each', { needs: ['list'], map: (i) => Array.from({ length: i.list }, (_, k) => k), run: () => 1 });

  let inCall = 0;
  let mostInCall = 0;
  const throttled = defineWorkflow({ name: 'throttled', schedule: '0 0 1 1 *' })
    .step('list', () => [1, 2, 3, 4, 5, 6, 7, 8])
    .step('call', {
      needs: ['list'],
      map: (i) => i.list,
      concurrency: { key: 'partner-api', limit: 2 },
      run: async (_ctx, n) => {
        mostInCall = Math.max(mostInCall, ++inCall);
        await sleep(150);
        inCall--;
        return n * n;
      },
    })
    .step('sum', { needs: ['call'], run: (_ctx, i) => i.call.reduce((a, b) => a + b, 0) });

  const pacedStarts: number[] = [];
  const paced = defineWorkflow({ name: 'paced', schedule: '0 0 1 1 *' })
    .step('list', () => [1, 2, 3, 4, 5, 6, 7, 8, 9])
    .step('send', {
      needs: ['list'],
      map: (i) => i.list,
      rateLimit: { key: 'paced-api', max: 3, perMs: 500 },
      run: (_ctx, n) => {
        pacedStarts.push(Date.now());
        return n;
      },
    });

  before(async () => {
    db = await createTestDatabase();
    await db.pool.query('CREATE TABLE wf_effects (run text NOT NULL, what text NOT NULL)');
    replica = new Replica({
      replicaId: 'wf-1',
      namespace: `wf${randomUUID().slice(0, 8)}`,
      schema: db.schema,
      backend: new MemoryLeaseBackend({ store: new MemoryLeaseStore() }),
      databaseUrl: db.url,
      redisUrl: SHARED_REDIS_URL,
      jobs: [billing, diamond, flaky, slow, approval, nudge, wide, throttled, paced],
      admin: { port: 0 }, // its /metrics: the step attempts
      logger: pino({ level: 'silent' }),
      election: { ttlMs: 2000 },
    });
    await replica.start();
    for (let i = 0; i < 100 && replica.role !== 'leader'; i++) await sleep(50);
  });
  after(async () => {
    await replica?.stop();
    await db?.drop();
  });

  /** Fire `workflow` now; its workflow run's id. */
  async function fire(workflow: string): Promise<string> {
    // The replica leads once its first tenure's catch-up is planned: until then a trigger is refused.
    for (let i = 0; ; i++) {
      const fired = await replica.trigger(workflow).catch((err: Error) => {
        if (err.name !== 'NotLeaderError' || i > 200) throw err;
        return undefined;
      });
      if (fired) return fired.runId.toString();
      await sleep(50);
    }
  }

  async function runToEnd(workflow: string): Promise<{ id: string; state: string; steps: StepRow[] }> {
    return waitForEnd(await fire(workflow));
  }

  async function waitForEnd(id: string): Promise<{ id: string; state: string; steps: StepRow[] }> {
    const deadline = Date.now() + 30_000;
    let state = '';
    while (Date.now() < deadline) {
      state = (await db.pool.query<{ state: string }>(`SELECT state FROM ${db.schema}.cw_runs WHERE id = $1`, [id]))
        .rows[0]!.state;
      if (state !== 'pending' && state !== 'running') break;
      await sleep(50);
    }
    const steps = await db.pool.query<StepRow>(
      `SELECT id, step, item, state, result, started_at, finished_at, attempts, error FROM ${db.schema}.cw_runs
       WHERE workflow_run_id = $1 ORDER BY step, item`,
      [id],
    );
    return { id, state, steps: steps.rows };
  }

  /** I7: every step run started after each run of each of its needs finished. */
  function assertI7(steps: StepRow[], needs: Record<string, string[]>) {
    for (const s of steps)
      for (const need of needs[s.step] ?? [])
        for (const n of steps.filter((x) => x.step === need))
          assert.ok(s.started_at >= n.finished_at, `${s.step}#${s.item} started before ${need}#${n.item} finished`);
  }

  it('a fan-out of one run per item and a fan-in of their results in item order; each effect once', async () => {
    const run = await runToEnd('billing');
    assert.equal(run.state, 'completed');
    assert.deepEqual(
      run.steps.map((s) => [s.step, s.item, s.state]),
      [
        ['extract', null, 'completed'],
        ...[0, 1, 2, 3, 4].map((i) => ['invoice', i, 'completed']),
        ['report', null, 'completed'],
      ],
    );
    assert.equal(run.steps.at(-1)!.result, 'ann:30,bob:30,cy:20,dee:30,eve:30');
    const effects = await db.pool.query<{ what: string }>('SELECT what FROM wf_effects WHERE run = $1 ORDER BY what', [
      run.id,
    ]);
    assert.deepEqual(
      effects.rows.map((r) => r.what),
      [
        'extract',
        'invoice ann',
        'invoice bob',
        'invoice cy',
        'invoice dee',
        'invoice eve',
        'report ann:30,bob:30,cy:20,dee:30,eve:30',
      ],
    );
    assertI7(run.steps, { invoice: ['extract'], report: ['invoice'] });
    // Its step attempts in this replica's metrics, each first attempt with its hand-off.
    const samples = parseExposition(await (await fetch(`${replica.adminUrl}/metrics`)).text());
    for (const [step, n] of [
      ['extract', 1],
      ['invoice', 5],
      ['report', 1],
    ] as const)
      assert.equal(
        sampleValue(samples, 'cronwarden_workflow_step_attempts_total', {
          workflow: 'billing',
          step,
          outcome: 'completed',
        }),
        n,
        step,
      );
    assert.equal(sampleValue(samples, 'cronwarden_workflow_step_handoff_seconds_count', { workflow: 'billing' }), 7);
    assert.ok(sampleValue(samples, 'cronwarden_workflow_step_handoff_seconds_sum', { workflow: 'billing' })! >= 0);
  });

  it('a mapped step with a concurrency limit runs at most that many items at once; the rest wait their turn', async () => {
    const run = await runToEnd('throttled');
    assert.equal(run.state, 'completed');
    assert.equal(run.steps.find((s) => s.step === 'sum')!.result, 204);
    assert.equal(mostInCall, 2, 'two items at once, never more');
    const waited = run.steps.filter((s) => s.step === 'call' && s.attempts > 1);
    assert.ok(waited.length > 0, 'items over the limit waited (an attempt recorded skipped)');
  });

  it('a mapped step with a rate limit starts at most max items per window, through the queue (delayed deliveries)', async () => {
    const run = await runToEnd('paced');
    assert.equal(run.state, 'completed');
    assert.equal(pacedStarts.length, 9, 'each item started once');
    const admitted = (
      await db.pool.query<{ at: Date }>(
        `SELECT at FROM ${db.schema}.cw_rate_starts WHERE key = 'paced-api' AND used ORDER BY at`,
      )
    ).rows.map((r) => r.at.getTime());
    assert.equal(admitted.length, 9);
    for (let i = 3; i < admitted.length; i++)
      assert.ok(
        admitted[i]! - admitted[i - 3]! >= 500,
        `admissions ${i - 3} and ${i}: ${admitted[i]! - admitted[i - 3]!} ms`,
      );
    const spread = Math.max(...pacedStarts) - Math.min(...pacedStarts);
    assert.ok(spread >= 950, `nine starts at three per 500 ms take two windows: ${spread} ms`);
  });

  it('a diamond: its join is made once, after both branches, with both results', async () => {
    const run = await runToEnd('diamond');
    assert.equal(run.state, 'completed');
    assert.deepEqual(
      run.steps.map((s) => [s.step, s.state, s.result]),
      [
        ['a', 'completed', 1],
        ['b', 'completed', 2],
        ['c', 'completed', 3],
        ['d', 'completed', 5],
      ],
    );
    assertI7(run.steps, { b: ['a'], c: ['a'], d: ['b', 'c'] });
    const effects = await db.pool.query('SELECT 1 FROM wf_effects WHERE run = $1', [run.id]);
    assert.equal(effects.rowCount, 1);
  });

  async function gates(id: string) {
    const res = await db.pool.query<{ step: string; state: string }>(
      `SELECT step, state FROM ${db.schema}.cw_workflow_steps WHERE workflow_run_id = $1 ORDER BY step`,
      [id],
    );
    return Object.fromEntries(res.rows.map((g) => [g.step, g.state]));
  }

  async function until(what: string, ok: () => Promise<boolean>): Promise<void> {
    const deadline = Date.now() + 20_000;
    while (!(await ok())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await sleep(50);
    }
  }

  it('a step that fails after its retries fails the run and cancels what had not started; retry resumes from it', async () => {
    const failed = await runToEnd('flaky');
    assert.equal(failed.state, 'failed');
    assert.deepEqual(
      failed.steps.map((s) => [s.step, s.state, s.attempts]),
      [
        ['a', 'completed', 1],
        ['b', 'failed', 2],
      ],
      'b failed after its one retry; c was never made',
    );
    assert.deepEqual(await gates(failed.id), { a: 'completed', b: 'failed', c: 'cancelled' });
    const run = await db.pool.query<{ error: string }>(`SELECT error FROM ${db.schema}.cw_runs WHERE id = $1`, [
      failed.id,
    ]);
    assert.match(run.rows[0]!.error, /^step "b" failed: b is broken/);

    const completedAt = async () =>
      (
        await db.pool.query<{ completed_at: Date }>(
          `SELECT completed_at FROM ${db.schema}.cw_workflow_steps WHERE workflow_run_id = $1 AND step = 'a'`,
          [failed.id],
        )
      ).rows[0]!.completed_at.getTime();
    const aCompletedAt = await completedAt();
    bFixed = true;
    const retried = await replica.retry(BigInt(failed.id));
    assert.equal(await completedAt(), aCompletedAt, 'the retry keeps when a completed step completed');
    assert.equal(retried.previousState, 'failed');
    const resumed = await waitForEnd(failed.id);
    assert.equal(resumed.state, 'completed');
    assert.deepEqual(
      resumed.steps.map((s) => [s.step, s.state, s.attempts, s.result]),
      [
        ['a', 'completed', 1, 'a'],
        ['b', 'completed', 3, 'b'],
        ['c', 'completed', 1, 'bc'],
      ],
      'a was not run again; b ran once more; c was made',
    );
    const effects = await db.pool.query("SELECT 1 FROM wf_effects WHERE run = $1 AND what = 'a'", [failed.id]);
    assert.equal(effects.rowCount, 1, "a's effect once");
    await assert.rejects(replica.retry(BigInt(failed.id)), /only a failed or cancelled one resumes/);
  });

  it('cancel: the running step is told to stop and its late writes are refused; nothing after it starts', async () => {
    const id = await fire('slow');
    await until('step a running', async () => {
      const r = await db.pool.query(
        `SELECT 1 FROM ${db.schema}.cw_runs WHERE workflow_run_id = $1 AND step = 'a' AND state = 'running'`,
        [id],
      );
      return r.rowCount === 1;
    });
    assert.equal(await replica.workflows.cancel(BigInt(id), 'cancelled by the test'), true);
    assert.equal(await replica.workflows.cancel(BigInt(id), 'again'), false, 'a cancelled run is not cancelled twice');
    const end = await waitForEnd(id);
    assert.equal(end.state, 'cancelled');
    await until('step a settled', async () => {
      const r = await db.pool.query<{ state: string }>(
        `SELECT state FROM ${db.schema}.cw_run_attempts WHERE run_id = (SELECT id FROM ${db.schema}.cw_runs WHERE workflow_run_id = $1 AND step = 'a')`,
        [id],
      );
      return r.rows.every((a) => a.state !== 'running');
    });
    const effects = await db.pool.query("SELECT 1 FROM wf_effects WHERE run = $1 AND what = 'slow a'", [id]);
    assert.equal(effects.rowCount, 0, "the cancelled step's transaction rolled back");
    assert.deepEqual(
      end.steps.map((s) => [s.step, s.state]),
      [['a', 'cancelled']],
    );
    assert.deepEqual(await gates(id), { a: 'cancelled', b: 'cancelled' });
  });

  it('a step waits for a signal without a worker; the first signal of a name counts', async () => {
    const id = await fire('approval');
    await until('approve waiting', async () => (await gates(id)).prepare === 'completed');
    assert.equal((await gates(id)).approve, 'waiting');
    const sent = await replica.workflows.signal(BigInt(id), 'approved', { by: 'alice' }, 'test');
    assert.deepEqual(sent, { accepted: true, started: 1 });
    const end = await waitForEnd(id);
    assert.equal(end.state, 'completed');
    assert.deepEqual(end.steps.find((s) => s.step === 'approve')!.result, { amount: 42, by: { by: 'alice' } });
    assert.deepEqual(await replica.workflows.signal(BigInt(id), 'approved', { by: 'bob' }, 'test'), {
      accepted: false,
      started: 0,
    });
  });

  it('a wait past its timeout goes on (onTimeout "continue"); a delay holds its step back', async () => {
    const run = await runToEnd('nudge');
    assert.equal(run.state, 'completed');
    const [ask, go, later] = ['ask', 'go', 'later'].map((n) => run.steps.find((s) => s.step === n)!);
    assert.equal(go!.result, 'no answer');
    assert.ok(go!.started_at.getTime() - ask!.finished_at.getTime() >= 1400, 'go waited for its timeout');
    assert.ok(later!.started_at.getTime() - go!.finished_at.getTime() >= 1400, 'later waited its delay');
  });

  it('a map wider than the bound fails the run with the reason; nothing is made', async () => {
    const run = await runToEnd('wide');
    assert.equal(run.state, 'failed');
    const row = await db.pool.query<{ error: string }>(`SELECT error FROM ${db.schema}.cw_runs WHERE id = $1`, [
      run.id,
    ]);
    assert.match(row.rows[0]!.error, /10001 items; a step fans out to at most 10000/);
    assert.deepEqual(
      run.steps.map((s) => s.step),
      ['list'],
    );
  });

  it('after every test: a run is active exactly when its finished_at is NULL (what the unfinished-run indexes rely on)', async () => {
    const res = await db.pool.query(
      `SELECT id, kind, state, finished_at FROM ${db.schema}.cw_runs WHERE (finished_at IS NULL) <> (state IN ${ACTIVE_SQL})`,
    );
    assert.deepEqual(res.rows, []);
  });
});
