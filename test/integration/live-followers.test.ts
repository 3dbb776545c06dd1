import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { liveFollowers, upsertMember } from '../../src/ledger/members.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

/** The followers a stand-in chooses among: member rows that beat lately and do not lead. */
describe('liveFollowers (real PostgreSQL)', () => {
  let db: TestDatabase;
  let ledger: Ledger;
  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool, db.schema);
  });
  after(async () => {
    await db.drop();
  });

  it('lists replicas seen within the window that do not lead, by id', async () => {
    const t = ledger.tables;
    const member = (replicaId: string, role: string) =>
      upsertMember(db.pool, t, { replicaId, role, host: 'h', pid: 1, version: 'v', adminUrl: null, jobs: ['a'] });
    await member('r3', 'follower');
    await member('r1', 'leader');
    await member('r2', 'candidate');
    await member('r4', 'follower');
    await db.pool.query(`UPDATE ${t.members} SET last_seen = now() - interval '1 minute' WHERE replica_id = 'r4'`);
    assert.deepEqual(await liveFollowers(db.pool, t, 10_000), ['r2', 'r3']);
  });
});
