import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { reportClientErrors } from '../../src/db/client-errors.js';
import { SHARED_POSTGRES_URL } from '../support/postgres-database.js';

/**
 * A server dropping a client that is checked out but between queries (what a ledger failover does
 * to a transaction waiting on its handler): without a listener node-postgres's 'error' event ends
 * the process, which is how a drill replica died with "unexpected postmaster exit".
 */
describe('reportClientErrors (real PostgreSQL)', () => {
  it("reports a checked-out client's lost connection; the holder's next query fails, the process lives", async () => {
    const pool = new pg.Pool({ connectionString: SHARED_POSTGRES_URL, max: 2 });
    const reported: Error[] = [];
    reportClientErrors(pool, (err) => reported.push(err));
    const admin = new pg.Client({ connectionString: SHARED_POSTGRES_URL });
    await admin.connect();
    try {
      const client = await pool.connect();
      const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const errored = new Promise<void>((resolve) => client.once('error', () => resolve()));
      await admin.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
      await errored;
      assert.equal(reported.length, 1);
      assert.match(reported[0]!.message, /terminat/i);
      await assert.rejects(client.query('SELECT 1'));
      client.release(true);
      assert.equal((await pool.query<{ n: number }>('SELECT 1 AS n')).rows[0]!.n, 1, 'the pool serves a new client');
    } finally {
      await admin.end();
      await pool.end();
    }
  });
});
