/**
 * Attempt rows written once, when the attempt ends (src/ledger/attempt-rows.ts), on the real
 * Ledger and PostgreSQL: a claim writes none, its completion one; a takeover writes the dead
 * attempt's; and a 'running' row a version before migration 0020 wrote at its claim is settled in
 * place by the new version's completion or takeover (a rolling upgrade's mixed fleet).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Ledger } from '../../src/ledger/ledger.js';
import type { Claim } from '../../src/ledger/run-ledger.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

describe('attempt rows at settlement (real PostgreSQL)', () => {
  let db: TestDatabase;
  let ledger: Ledger;
  const stamp = { fenceResource: 'scheduler/attempts', token: 1n, replicaId: 'test', stillLeading: () => true };
  let slot = Date.UTC(2026, 0, 1);

  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool, db.schema);
  });
  after(() => db.drop());

  const fire = async (): Promise<bigint> => {
    const { committed } = await ledger.fires.commitFires(
      [{ job: 'attempts', scheduledAt: new Date((slot += 1000)), trigger: 'schedule' as const }],
      stamp,
    );
    return committed[0]!.runId;
  };
  const claim = async (runId: bigint, worker: string): Promise<Claim> => {
    const [r] = await ledger.runs.claimMany([runId], worker);
    assert.equal(r!.status, 'claimed');
    return (r as { claim: Claim }).claim;
  };
  const rows = async (runId: bigint) =>
    (
      await db.pool.query<{ attempt: number; token: string; worker: string; state: string; started_at: Date }>(
        'SELECT attempt, token::text, worker, state, started_at FROM cw_run_attempts WHERE run_id = $1 ORDER BY attempt',
        [runId.toString()],
      )
    ).rows;
  /** What a replica before 0020 left: the attempt's row written at its claim, no claimed_at. */
  const asAnOldReplicaClaimed = async (c: Claim, worker: string) => {
    await db.pool.query('UPDATE cw_runs SET claimed_at = NULL WHERE id = $1', [c.runId.toString()]);
    await db.pool.query(
      "INSERT INTO cw_run_attempts (run_id, attempt, token, worker, state, started_at) VALUES ($1, $2, $3, $4, 'running', now() - interval '1 minute')",
      [c.runId.toString(), c.attempt, c.token.toString(), worker],
    );
  };

  it('a claim writes no attempt row; its completion writes one, with the claimer and the claim instant', async () => {
    const runId = await fire();
    const c = await claim(runId, 'w1');
    assert.deepEqual(await rows(runId), []);
    assert.deepEqual(await ledger.runs.finishMany([{ ...c, outcome: 'completed' }]), [true]);
    const [row, ...more] = await rows(runId);
    assert.equal(more.length, 0);
    assert.deepEqual([row!.attempt, row!.token, row!.worker, row!.state], [1, c.token.toString(), 'w1', 'completed']);
    const claimedAt = await db.pool.query<{ claimed_at: Date }>('SELECT claimed_at FROM cw_runs WHERE id = $1', [
      runId.toString(),
    ]);
    assert.equal(row!.started_at.getTime(), claimedAt.rows[0]!.claimed_at.getTime());
  });

  it("a takeover writes the dead attempt's row 'stale'; that worker's late outcome is refused and changes nothing", async () => {
    const runId = await fire();
    const first = await claim(runId, 'w1');
    // w1 has no cw_workers row: it counts as stopped beating, so w2 takes the run over.
    const second = await claim(runId, 'w2');
    assert.deepEqual(
      (await rows(runId)).map((r) => [r.attempt, r.worker, r.state]),
      [[1, 'w1', 'stale']],
    );
    assert.deepEqual(await ledger.runs.finishMany([{ ...first, outcome: 'completed' }]), [false]);
    assert.deepEqual(await ledger.runs.finishMany([{ ...second, outcome: 'completed' }]), [true]);
    assert.deepEqual(
      (await rows(runId)).map((r) => [r.attempt, r.worker, r.state]),
      [
        [1, 'w1', 'stale'],
        [2, 'w2', 'completed'],
      ],
    );
  });

  it("an old replica's 'running' row is settled in place by a completion, keeping its start", async () => {
    const runId = await fire();
    const c = await claim(runId, 'old');
    await asAnOldReplicaClaimed(c, 'old');
    const before = (await rows(runId))[0]!.started_at;
    assert.deepEqual(await ledger.runs.finishMany([{ ...c, outcome: 'failed', error: new Error('boom') }]), [true]);
    const settled = await rows(runId);
    assert.deepEqual(
      settled.map((r) => [r.attempt, r.worker, r.state]),
      [[1, 'old', 'failed']],
    );
    assert.equal(settled[0]!.started_at.getTime(), before.getTime());
  });

  it("an old replica's 'running' row is settled 'stale' by a takeover, and by its own refused outcome", async () => {
    const runId = await fire();
    const c = await claim(runId, 'old-dead');
    await asAnOldReplicaClaimed(c, 'old-dead');
    const next = await claim(runId, 'new');
    assert.deepEqual(
      (await rows(runId)).map((r) => [r.attempt, r.worker, r.state]),
      [[1, 'old-dead', 'stale']],
    );
    // A second old claim, refused: its row (written at that claim) settles 'stale' with the outcome.
    const other = await fire();
    const o1 = await claim(other, 'old-a');
    await asAnOldReplicaClaimed(o1, 'old-a');
    await db.pool.query(
      "UPDATE cw_runs SET state = 'cancelled', finished_at = now(), error = 'cancelled by hand' WHERE id = $1",
      [other.toString()],
    );
    assert.deepEqual(await ledger.runs.finishMany([{ ...o1, outcome: 'completed' }]), [false]);
    assert.deepEqual(
      (await rows(other)).map((r) => [r.attempt, r.state]),
      [[1, 'stale']],
    );
    assert.deepEqual(await ledger.runs.finishMany([{ ...next, outcome: 'completed' }]), [true]);
  });

  it("a running run cancelled by a 'replace' fire gets its attempt row 'cancelled'; the worker's outcome is refused", async () => {
    const runId = await fire();
    const c = await claim(runId, 'w1');
    await ledger.fires.commitFires(
      [{ job: 'attempts', scheduledAt: new Date((slot += 1000)), trigger: 'schedule' as const, replace: true }],
      stamp,
    );
    const cancelled = (await rows(runId)).map((r) => [r.attempt, r.worker, r.state]);
    assert.deepEqual(cancelled, [[1, 'w1', 'cancelled']]);
    assert.deepEqual(await ledger.runs.finishMany([{ ...c, outcome: 'completed' }]), [false]);
    assert.deepEqual(
      (await rows(runId)).map((r) => [r.attempt, r.worker, r.state]),
      cancelled,
    );
  });

  it("a deleted run's attempt rows go with it, whoever deletes it (no foreign key since 0022: a trigger)", async () => {
    const runId = await fire();
    const first = await claim(runId, 'w1');
    await claim(runId, 'w2');
    assert.deepEqual(await ledger.runs.finishMany([{ ...first, outcome: 'completed' }]), [false]);
    assert.equal((await rows(runId)).length, 1);
    await db.pool.query('DELETE FROM cw_runs WHERE id = $1', [runId.toString()]);
    assert.deepEqual(await rows(runId), []);
    const open = await db.pool.query('SELECT 1 FROM cw_open_runs WHERE run_id = $1', [runId.toString()]);
    assert.equal(open.rowCount, 0);
  });
});
