/**
 * The leader's fire commits hold its fence row FOR SHARE once the fence is at its token, so two
 * chunks of one tick commit side by side; a new leader's advance still waits for both, and the old
 * token is refused after it (I3: tokens on committed runs never decrease in commit order).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { StaleTokenError } from '../../src/errors.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { freezingPool } from '../support/freezing-pool.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

const FENCE = 'scheduler/shared';

describe("the leader's fire commits share its fence (real PostgreSQL)", () => {
  let db: TestDatabase;
  let ledger: Ledger;
  const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));
  const leader = (token: bigint) => ({ fenceResource: FENCE, token, replicaId: 'r', stillLeading: () => true });
  const fire = (job: string, s: number) => ({ job, scheduledAt: at(s), trigger: 'schedule' as const });
  const within = <T>(p: Promise<T>, ms: number) =>
    Promise.race([p, new Promise<'waiting'>((r) => setTimeout(() => r('waiting'), ms).unref())]);

  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool, db.schema);
    await ledger.fires.advanceFence(FENCE, 3n);
  });
  after(async () => {
    await db.drop();
  });

  it('a second chunk under the same token commits while the first is still open; a new leader waits for it', async () => {
    const f = freezingPool(db.url);
    const open = new Ledger(f.pool, db.schema);
    // The first chunk stops inside its transaction, holding the fence.
    const first = open.fires.commitFires([fire('a', 1)], leader(3n));
    await f.hasFrozen;
    try {
      const second = await within(ledger.fires.commitFires([fire('b', 1)], leader(3n)), 5000);
      assert.notEqual(second, 'waiting', 'the second chunk waited for the first (the fence row was locked)');
      assert.equal(second === 'waiting' ? 0 : second.committed.length, 1);

      // A new leader's advance waits for the open chunk: it must not land before a token it succeeds.
      const advance = ledger.fires.advanceFence(FENCE, 4n).then(() => 'advanced' as const);
      assert.equal(await within(advance, 500), 'waiting', 'the new leader advanced past an open commit');
      f.thaw();
      assert.equal((await first).committed.length, 1, 'the first chunk commits');
      assert.equal(await advance, 'advanced');
    } finally {
      f.thaw();
      await f.pool.end();
    }
    await assert.rejects(ledger.fires.commitFires([fire('c', 1)], leader(3n)), StaleTokenError);
    const tokens = await db.pool.query<{ job: string; t: string }>(
      `SELECT job, leader_token::text AS t FROM ${ledger.tables.runs} ORDER BY job`,
    );
    assert.deepEqual(tokens.rows, [
      { job: 'a', t: '3' },
      { job: 'b', t: '3' },
    ]);
  });

  it('a fence below the token is advanced by the commit itself, and a higher one refuses it', async () => {
    const r = await ledger.fires.commitFires([fire('d', 2)], leader(7n));
    assert.equal(r.committed.length, 1);
    assert.equal(await ledger.fires.fenceToken(FENCE), 7n);
    await assert.rejects(ledger.fires.commitFires([fire('e', 2)], leader(6n)), StaleTokenError);
    const again = await ledger.fires.commitFires([fire('f', 2)], leader(7n));
    assert.equal(again.committed.length, 1, 'the same token passes (held, not advanced)');
  });
});
