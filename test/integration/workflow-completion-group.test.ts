/**
 * Step completions of one workflow run in one transaction (completeStepsOfRun, real PostgreSQL):
 * each is still token-checked on its own, a result that cannot be stored fails only its own step,
 * and the group makes the next step exactly when the last item completes, once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { defineWorkflow } from '../../src/jobs/define-workflow.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { claimAll } from '../support/claimed-runs.js';
import { stepRefOf } from '../support/step-claims.js';

const flow = defineWorkflow({ name: 'fan', schedule: '0 0 1 1 *' })
  .step('list', () => [1, 2, 3, 4, 5])
  .step('item', { needs: ['list'], map: (i) => i.list, run: (_ctx, n: number) => n * 10 })
  .step('sum', { needs: ['item'], run: (_ctx, i) => i.item.reduce((a, b) => a + b, 0) });

describe('step completions of one workflow run, grouped (real PostgreSQL)', () => {
  let db: TestDatabase;
  let ledger: Ledger;
  const stamp = { fenceResource: 'scheduler/fan', token: 1n, replicaId: 'test', stillLeading: () => true };

  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool, db.schema);
  });
  after(async () => {
    await db.drop();
  });

  it('checks each token on its own, fails only an unstorable result, and makes the next step once, with the last item', async () => {
    const fired = await ledger.fires.commitFires(
      [{ job: 'fan', scheduledAt: new Date(Date.UTC(2026, 0, 1)), trigger: 'schedule' }],
      stamp,
    );
    const [wf] = await claimAll(ledger, [fired.committed[0]!.runId]);
    const [list] = await ledger.workflows.start(wf!, flow.graph);
    const [listClaim] = await claimAll(ledger, [list!.runId]);
    const items = await ledger.workflows.complete(flow.graph, stepRefOf(listClaim!), [1, 2, 3, 4, 5]);
    assert.equal(items?.length, 5);
    const claims = await claimAll(
      ledger,
      items.map((r) => r.runId),
    );
    const refs = claims.map(stepRefOf);

    // Three items: one with a token that is not its newest (refused), one whose result is not JSON.
    const first = await ledger.workflows.completeMany([
      { graph: flow.graph, ref: refs[0]!, result: 10 },
      { graph: flow.graph, ref: { ...refs[1]!, token: refs[1]!.token - 1000n }, result: 20 },
      { graph: flow.graph, ref: refs[2]!, result: 10n },
    ]);
    assert.deepEqual(first[0], { ok: true, made: [] });
    assert.deepEqual(first[1], { ok: true, made: null }, 'refused: a newer attempt holds it');
    assert.equal(first[2]!.ok, false);
    assert.match(String((first[2] as { error: Error }).error.message), /not JSON/);
    const left = async () =>
      (
        await db.pool.query<{ items_left: number }>(
          `SELECT items_left FROM ${ledger.tables.workflowSteps} WHERE workflow_run_id = $1 AND step = 'item'`,
          [wf!.runId.toString()],
        )
      ).rows[0]!.items_left;
    assert.equal(await left(), 4, 'only the accepted completion counted');

    // The rest together: the last of them makes "sum", once.
    const rest = await ledger.workflows.completeMany(
      [1, 2, 3, 4].map((i) => ({ graph: flow.graph, ref: refs[i]!, result: (i + 1) * 10 })),
    );
    assert.equal(await left(), 0);
    const made = rest.flatMap((o) => (o.ok && o.made ? o.made : []));
    assert.deepEqual(
      made.map((r) => r.job.split(':').at(-1)),
      ['sum'],
    );
    assert.deepEqual(
      rest.map((o) => o.ok && o.made !== null),
      [true, true, true, true],
    );
    const again = await ledger.workflows.completeMany([{ graph: flow.graph, ref: refs[0]!, result: 10 }]);
    assert.deepEqual(again, [{ ok: true, made: null }], 'a completed item is not completed twice');
    await assert.rejects(
      ledger.workflows.completeMany([
        { graph: flow.graph, ref: refs[0]!, result: 1 },
        { graph: flow.graph, ref: { ...refs[1]!, workflowRunId: refs[1]!.workflowRunId + 1n }, result: 1 },
      ]),
      /one workflow run/,
    );
  });
});
