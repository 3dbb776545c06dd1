/**
 * Replicas that start together all bind the ledger's schema to their namespace at once: every one
 * must get the namespace the first wrote, none a "not migrated" because its statement's snapshot
 * was taken before the winner committed (seen in CI when the demo started three replicas).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { NamespaceMismatchError } from '../../src/errors.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

let db: TestDatabase;
before(async () => {
  db = await createTestDatabase();
});
after(async () => {
  await db.drop();
});

it('eight replicas binding the namespace at once all succeed; another namespace is refused', async () => {
  const ledgers = Array.from({ length: 8 }, () => new Ledger(db.pool, db.schema));
  for (let round = 0; round < 20; round++) {
    await db.pool.query(`UPDATE ${ledgers[0]!.tables.ledger} SET namespace = NULL`);
    const results = await Promise.allSettled(ledgers.map((l) => l.bindNamespace('together')));
    assert.deepEqual(
      results.filter((r) => r.status === 'rejected').map((r) => String(r.reason)),
      [],
      `round ${round}`,
    );
  }
  await assert.rejects(ledgers[0]!.bindNamespace('another'), NamespaceMismatchError);
});
