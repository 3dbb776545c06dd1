/**
 * A worker's cycle: the outcomes and claims asked for at about the same time go to the ledger in
 * one round trip and one commit (RunLedger.finishAndClaim), on real PostgreSQL. Both halves commit
 * or neither; a failure of the two together that a retry could not fix is sent apart, so each call
 * fails only of its own; the ledger unreachable fails both at once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import pg from 'pg';
import { Ledger } from '../../src/ledger/ledger.js';
import type { Claim, RunLedger } from '../../src/ledger/run-ledger.js';
import { RunLedgerBatches } from '../../src/jobs/run-ledger-batches.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { claimedRuns } from '../support/claimed-runs.js';

/** No bigint: PostgreSQL refuses the claim of this run id (numeric value out of range). */
const OUT_OF_RANGE_ID = 2n ** 63n;

/** The real ledger, counting the calls RunLedgerBatches makes of it. */
function counting(runs: RunLedger) {
  const calls: { method: string; finishes: number; claims: number }[] = [];
  const ledger = {
    finishAndClaim: (
      requests: Parameters<RunLedger['finishAndClaim']>[0],
      c: Parameters<RunLedger['finishAndClaim']>[1],
    ) => {
      calls.push({ method: 'finishAndClaim', finishes: requests.length, claims: c.runIds.length });
      return runs.finishAndClaim(requests, c);
    },
    finishMany: (requests: Parameters<RunLedger['finishMany']>[0]) => {
      calls.push({ method: 'finishMany', finishes: requests.length, claims: 0 });
      return runs.finishMany(requests);
    },
    claimMany: (ids: readonly bigint[], worker: string) => {
      calls.push({ method: 'claimMany', finishes: 0, claims: ids.length });
      return runs.claimMany(ids, worker);
    },
    completeGroupInTransaction: runs.completeGroupInTransaction.bind(runs),
    completeInTransaction: runs.completeInTransaction.bind(runs),
    fenceRun: runs.fenceRun.bind(runs),
    runState: runs.runState.bind(runs),
  };
  return { ledger, calls };
}

describe('worker cycle: outcomes and claims in one round trip (real PostgreSQL)', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let ledger: Ledger;
  let claim: (n: number) => Promise<Claim[]>;
  let slot = Date.UTC(2026, 3, 1);
  const stamp = { fenceResource: 'scheduler/cycle', token: 1n, replicaId: 'test', stillLeading: () => true };

  before(async () => {
    db = await createTestDatabase();
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    ledger = new Ledger(pool, db.schema);
    claim = claimedRuns(ledger, { job: 'cycle' });
  });
  after(async () => {
    await pool.end();
    await db.drop();
  });

  /** `n` runs committed, not claimed. */
  const pending = async (n: number): Promise<bigint[]> => {
    const fires = Array.from({ length: n }, () => ({
      job: 'cycle',
      scheduledAt: new Date((slot += 1000)),
      trigger: 'schedule' as const,
    }));
    return (await ledger.fires.commitFires(fires, stamp)).committed.map((f) => f.runId);
  };
  const states = async (ids: readonly bigint[]) =>
    (
      await pool.query<{ state: string; claimed_by: string | null }>(
        `SELECT state, claimed_by FROM "${db.schema}".cw_runs WHERE id = ANY($1) ORDER BY id`,
        [ids.map(String)],
      )
    ).rows;

  it('outcomes and claims asked for in one turn go in one call: every outcome recorded, every run claimed', async () => {
    const running = await claim(3);
    const waiting = await pending(3);
    const { ledger: counted, calls } = counting(ledger.runs);
    const batches = new RunLedgerBatches(counted);
    const [finished, claimed] = await Promise.all([
      Promise.all(running.map((c) => batches.finish(c, 'completed'))),
      Promise.all(waiting.map((id) => batches.claim(id, 'w2'))),
    ]);
    assert.deepEqual(finished, [true, true, true]);
    assert.deepEqual(
      claimed.map((r) => r.status),
      ['claimed', 'claimed', 'claimed'],
    );
    assert.deepEqual(calls, [{ method: 'finishAndClaim', finishes: 3, claims: 3 }]);
    assert.deepEqual(
      (await states(running.map((c) => c.runId))).map((r) => r.state),
      ['completed', 'completed', 'completed'],
    );
    assert.deepEqual(await states(waiting), Array(3).fill({ state: 'running', claimed_by: 'w2' }));
  });

  it("another worker's claims in the same batch go alone: each claimed for its own worker", async () => {
    const [running] = await claim(1);
    const [mine, theirs] = await pending(2);
    const { ledger: counted, calls } = counting(ledger.runs);
    const batches = new RunLedgerBatches(counted);
    const [finished, a, b] = await Promise.all([
      batches.finish(running!, 'completed'),
      batches.claim(mine!, 'w2'),
      batches.claim(theirs!, 'w3'),
    ]);
    assert.equal(finished, true);
    assert.deepEqual([a.status, b.status], ['claimed', 'claimed']);
    assert.deepEqual(calls, [
      { method: 'finishAndClaim', finishes: 1, claims: 1 },
      { method: 'claimMany', finishes: 0, claims: 1 },
    ]);
    assert.deepEqual(await states([mine!, theirs!]), [
      { state: 'running', claimed_by: 'w2' },
      { state: 'running', claimed_by: 'w3' },
    ]);
  });

  it('both halves commit or neither: a claim PostgreSQL refuses leaves the outcome unrecorded', async () => {
    const [c] = await claim(1);
    await assert.rejects(
      ledger.runs.finishAndClaim([{ runId: c!.runId, token: c!.token, attempt: c!.attempt, outcome: 'completed' }], {
        runIds: [OUT_OF_RANGE_ID],
        worker: 'w1',
      }),
      /out of range/,
    );
    assert.deepEqual(await states([c!.runId]), [{ state: 'running', claimed_by: 'w1' }]);
    // The same outcome alone is recorded.
    assert.deepEqual(
      await ledger.runs.finishMany([{ runId: c!.runId, token: c!.token, attempt: c!.attempt, outcome: 'completed' }]),
      [true],
    );
  });

  it('a failure of the two together is sent apart: the outcome is recorded, only the bad claim fails', async () => {
    const [c] = await claim(1);
    const { ledger: counted, calls } = counting(ledger.runs);
    const batches = new RunLedgerBatches(counted);
    const [finished, refused] = await Promise.allSettled([
      batches.finish(c!, 'completed'),
      batches.claim(OUT_OF_RANGE_ID, 'w1'),
    ]);
    assert.deepEqual(finished, { status: 'fulfilled', value: true });
    assert.equal(refused.status, 'rejected');
    assert.match(String(refused.reason), /out of range/);
    assert.deepEqual(
      calls.map((x) => x.method),
      ['finishAndClaim', 'finishMany', 'claimMany'],
    );
    assert.deepEqual(await states([c!.runId]), [{ state: 'completed', claimed_by: 'w1' }]);
  });

  it('the ledger unreachable: both calls fail with it at once, nothing sent apart', async () => {
    const closed = await new Promise<number>((resolve) => {
      const server = net.createServer().listen(0, '127.0.0.1', () => {
        const { port } = server.address() as net.AddressInfo;
        server.close(() => resolve(port));
      });
    });
    const unreachable = new pg.Pool({ host: '127.0.0.1', port: closed, user: 'postgres', database: 'test', max: 2 });
    try {
      const { ledger: counted, calls } = counting(new Ledger(unreachable, db.schema).runs);
      const batches = new RunLedgerBatches(counted);
      const [c] = await claim(1);
      const [finished, claimed] = await Promise.allSettled([batches.finish(c!, 'completed'), batches.claim(1n, 'w1')]);
      assert.equal(finished.status, 'rejected');
      assert.equal(claimed.status, 'rejected');
      assert.match(String(finished.reason), /ECONNREFUSED/);
      assert.deepEqual(
        calls.map((x) => x.method),
        ['finishAndClaim'],
      );
    } finally {
      await unreachable.end();
    }
  });
});
