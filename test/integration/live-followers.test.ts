import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { liveMembers, upsertMember } from '../../src/ledger/members.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

/** The members a stand-in and the shard balancer choose among: member rows that beat lately. */
describe('liveMembers (real PostgreSQL)', () => {
  let db: TestDatabase;
  let ledger: Ledger;
  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool, db.schema);
  });
  after(async () => {
    await db.drop();
  });

  it('lists replicas seen within the window, by id, with their role and the age of their last beat', async () => {
    const t = ledger.tables;
    const member = (replicaId: string, role: string) =>
      upsertMember(db.pool, t, { replicaId, role, host: 'h', pid: 1, version: 'v', adminUrl: null, jobs: ['a'] });
    await member('r3', 'follower');
    await member('r1', 'leader');
    await member('r2', 'candidate');
    await member('r4', 'follower');
    await db.pool.query(`UPDATE ${t.members} SET last_seen = now() - interval '1 minute' WHERE replica_id = 'r4'`);
    await db.pool.query(`UPDATE ${t.members} SET last_seen = now() - interval '2 seconds' WHERE replica_id = 'r3'`);
    const live = await liveMembers(db.pool, t, 10_000);
    assert.deepEqual(
      live.map((m) => [m.replicaId, m.role]),
      [
        ['r1', 'leader'],
        ['r2', 'candidate'],
        ['r3', 'follower'],
      ],
    );
    const age = new Map(live.map((m) => [m.replicaId, m.ageMs]));
    assert.ok(age.get('r3')! >= 2000 && age.get('r3')! < 5000, `r3 beat 2 s ago, got ${age.get('r3')}`);
    assert.ok(age.get('r1')! < 1000, `r1 just beat, got ${age.get('r1')}`);
  });
});
