/**
 * The drill's lock watch names who waited on a lock and who held it, from the real
 * pg_stat_activity and pg_blocking_pids, with each replica's sessions named after it.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describeLockWaits, LockWatch } from '../../src/drill/lock-watch.js';
import { ledgerPool } from '../../src/replica/connections.js';
import { createTestDatabase } from '../support/postgres-database.js';

it('names the waiting session, its statement and the session that holds the lock', { timeout: 30_000 }, async () => {
  const db = await createTestDatabase();
  const holderPool = ledgerPool(db.url, 'holder');
  const waiterPool = ledgerPool(db.url, 'waiter');
  try {
    await db.pool.query('CREATE TABLE held (id int PRIMARY KEY); INSERT INTO held VALUES (1)');
    const holder = await holderPool.connect();
    await holder.query('BEGIN; UPDATE held SET id = 1 WHERE id = 1');
    const watch = LockWatch.start(db.pool, 300);
    const waiting = waiterPool.query('UPDATE held SET id = 1 WHERE id = 1');
    await sleep(1200);
    const report = await watch.stop();
    await holder.query('COMMIT');
    holder.release();
    await waiting;
    assert.equal(report.waits.length, 1, JSON.stringify(report));
    const [w] = report.waits;
    assert.equal(w!.waiter, 'cronwarden waiter');
    assert.match(w!.query, /^UPDATE held/);
    assert.equal(w!.lock, 'transactionid');
    assert.ok(w!.waitedMs >= 800, `waited ${w!.waitedMs} ms`);
    assert.deepEqual(
      w!.blockers.map((b) => [b.name, b.state]),
      [['cronwarden holder', 'idle in transaction']],
    );
    assert.ok(report.busiest['cronwarden holder']! >= 1 && report.busiest['cronwarden waiter']! >= 1);
    assert.match(
      describeLockWaits(report),
      /^cronwarden waiter waited \d+ ms \(a transactionid lock\) in "UPDATE held SET id = 1 WHERE id = 1" for cronwarden holder \(idle in transaction, \d+ ms in its transaction: "BEGIN; UPDATE held/,
    );
  } finally {
    await holderPool.end();
    await waiterPool.end();
    await db.drop();
  }
});
