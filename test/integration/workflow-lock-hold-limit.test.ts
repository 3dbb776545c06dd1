/**
 * A replica frozen (SIGSTOP, a paused VM) right after it locked a workflow run to record a step's
 * completion must not hold up the run's other completions until it thaws: the lock statement lets
 * PostgreSQL end the session once it sat idle a lease TTL (lockWorkflowRun). Without that, the
 * drill saw every replica's pool fill with completions queued on one frozen lock, and the next
 * leader's first fire wait the whole freeze for a connection.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { defineWorkflow } from '../../src/jobs/define-workflow.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { freezingPool } from '../support/freezing-pool.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { claimAll } from '../support/claimed-runs.js';
import { stepRefOf } from '../support/step-claims.js';

const LIMIT_MS = 1000;

const flow = defineWorkflow({ name: 'held', schedule: '0 0 1 1 *' })
  .step('list', () => [1, 2, 3])
  .step('item', { needs: ['list'], map: (i) => i.list, run: (_ctx, n: number) => n })
  .step('sum', { needs: ['item'], run: (_ctx, i) => i.item.length });

describe('a replica frozen while it holds a workflow run lock (real PostgreSQL)', () => {
  let db: TestDatabase;
  let ledger: Ledger;

  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool, db.schema);
  });
  after(async () => {
    await db.drop();
  });

  it("another replica's completion goes through once the frozen session sat idle a lease TTL; the frozen one's is undone", async () => {
    const fired = await ledger.fires.commitFires(
      [{ job: 'held', scheduledAt: new Date(Date.UTC(2026, 0, 1)), trigger: 'schedule' }],
      { fenceResource: 'scheduler/held', token: 1n, replicaId: 'test', stillLeading: () => true },
    );
    const [wf] = await claimAll(ledger, [fired.committed[0]!.runId]);
    const [list] = await ledger.workflows.start(wf!, flow.graph);
    const [listClaim] = await claimAll(ledger, [list!.runId]);
    const items = await ledger.workflows.complete(flow.graph, stepRefOf(listClaim!), [1, 2, 3]);
    const refs = (
      await claimAll(
        ledger,
        items!.map((r) => r.runId),
      )
    ).map(stepRefOf);

    const f = freezingPool(db.url, (text) => text.includes('hold_limit'));
    const frozen = new Ledger(f.pool, db.schema);
    frozen.useLeaseTtl(LIMIT_MS);
    const held = frozen.workflows.complete(flow.graph, refs[0]!, 1).then(
      () => 'committed',
      (err: Error) => err,
    );
    try {
      await f.hasFrozen;
      const started = Date.now();
      const other = await Promise.race([
        ledger.workflows.complete(flow.graph, refs[1]!, 2),
        new Promise<'waiting'>((r) => setTimeout(() => r('waiting'), 15_000).unref()),
      ]);
      const waitedMs = Date.now() - started;
      assert.notEqual(other, 'waiting', 'the other completion still waits for the frozen session after 15 s');
      assert.deepEqual(other, [], 'accepted; the fan-in is not complete yet');
      assert.ok(waitedMs >= LIMIT_MS * 0.8, `the lock was held by the frozen session (waited ${waitedMs} ms)`);
    } finally {
      f.thaw();
    }
    const outcome = await held;
    assert.ok(outcome instanceof Error, `the frozen transaction was ended, not ${String(outcome)}`);
    const states = await db.pool.query<{ id: string; state: string }>(
      `SELECT id::text, state FROM ${ledger.tables.runs} WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [refs.slice(0, 2).map((r) => r.runId.toString())],
    );
    assert.deepEqual(
      states.rows.map((r) => r.state),
      ['running', 'completed'],
      "the frozen replica's completion was rolled back; the other's committed",
    );
    await f.pool.end();
  });
});
