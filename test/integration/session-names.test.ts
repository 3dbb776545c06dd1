/**
 * A replica's ledger sessions carry its id in pg_stat_activity, so an operator looking at a lock
 * can tell whose session holds it; a name the URL gives is the operator's and stays.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { ledgerPool } from '../../src/replica/connections.js';
import { SHARED_POSTGRES_URL } from '../support/postgres-database.js';

const nameOf = async (url: string) => {
  const pool = ledgerPool(url, 'replica-7');
  try {
    const r = await pool.query<{ name: string }>("SELECT current_setting('application_name') AS name");
    return r.rows[0]!.name;
  } finally {
    await pool.end();
  }
};

it("a replica's ledger sessions are named after it", async () => {
  assert.equal(await nameOf(SHARED_POSTGRES_URL), 'cronwarden replica-7');
});

it('an application_name in the ledger URL wins', async () => {
  const sep = SHARED_POSTGRES_URL.includes('?') ? '&' : '?';
  assert.equal(await nameOf(`${SHARED_POSTGRES_URL}${sep}application_name=billing`), 'billing');
});
