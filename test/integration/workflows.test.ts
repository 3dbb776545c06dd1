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
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface StepRow {
  id: string;
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
      jobs: [billing, diamond],
      admin: false,
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

  async function runToEnd(workflow: string): Promise<{ id: string; state: string; steps: StepRow[] }> {
    // The replica leads once its first tenure's catch-up is planned: until then a trigger is refused.
    let fire: Awaited<ReturnType<Replica['trigger']>> | undefined;
    for (let i = 0; !fire; i++) {
      fire = await replica.trigger(workflow).catch((err: Error) => {
        if (err.name !== 'NotLeaderError' || i > 200) throw err;
        return undefined;
      });
      if (!fire) await sleep(50);
    }
    const id = fire.runId.toString();
    const deadline = Date.now() + 30_000;
    let state = '';
    while (Date.now() < deadline) {
      state = (await db.pool.query<{ state: string }>(`SELECT state FROM ${db.schema}.cw_runs WHERE id = $1`, [id]))
        .rows[0]!.state;
      if (state !== 'pending' && state !== 'running') break;
      await sleep(50);
    }
    const steps = await db.pool.query<StepRow>(
      `SELECT id, step, item, state, result, started_at, finished_at FROM ${db.schema}.cw_runs
       WHERE workflow_run_id = $1 ORDER BY step, item`,
      [id],
    );
    if (state !== 'completed')
      console.log(
        JSON.stringify(
          (
            await db.pool.query(
              `SELECT id, step, item, state, error, result FROM ${db.schema}.cw_runs WHERE id = $1 OR workflow_run_id = $1 ORDER BY id`,
              [id],
            )
          ).rows,
        ),
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
});
