/**
 * Which statements a pipelined ctx.transaction callback may send (src/ledger/pipelined-client.ts):
 * what would let its statements act on, or wait for, another run's inside the shared transaction
 * is refused; the usual writes and reads pass.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type pg from 'pg';
import { PipelinedStatementError } from '../../src/errors.js';
import { pipelinedClient, refusalOf } from '../../src/ledger/pipelined-client.js';

describe('pipelined statements', () => {
  it('passes the usual writes and reads', () => {
    for (const sql of [
      'INSERT INTO orders (id, total) VALUES ($1, $2)',
      'UPDATE accounts SET balance = balance - $1 WHERE id = $2',
      'INSERT INTO t (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET a = excluded.a',
      'DELETE FROM carts WHERE id = $1 RETURNING *',
      "SELECT * FROM settings WHERE name = 'lockout'",
      'WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x',
      'SELECT updated_at, offset_value FROM t',
    ])
      assert.equal(refusalOf(sql), undefined, sql);
  });

  it('refuses row and advisory locks, wherever they are in the statement', () => {
    for (const [sql, word] of [
      ['SELECT n FROM counter WHERE id = 1 FOR UPDATE', 'for update'],
      ['select * from t for  no key update skip locked', 'for no key update'],
      ['SELECT * FROM t FOR SHARE', 'for share'],
      ['SELECT * FROM t FOR KEY SHARE', 'for key share'],
      ['SELECT pg_advisory_xact_lock(42)', 'pg_advisory_'],
      ['SELECT pg_try_advisory_lock(1)', 'pg_try_advisory_'],
    ] as const)
      assert.match(refusalOf(sql) ?? '', new RegExp(word.replace(/ +/g, ' '), 'i'), sql);
  });

  it("refuses statements of the transaction's own, also after another in one simple query", () => {
    for (const sql of [
      'SAVEPOINT a',
      'ROLLBACK TO SAVEPOINT a',
      'release a',
      'LOCK TABLE t IN EXCLUSIVE MODE',
      "SET LOCAL statement_timeout = '1s'",
      'RESET ALL',
      'COMMIT',
      'BEGIN',
      'DECLARE c CURSOR FOR SELECT 1',
      'INSERT INTO t VALUES (1); SAVEPOINT b',
    ])
      assert.match(refusalOf(sql) ?? '', /statement of the transaction's own/, sql);
  });

  it('the client refuses before sending, tells the group, and answers promise and callback callers', async () => {
    const sent: unknown[] = [];
    const fake = { query: (config: unknown) => (sent.push(config), Promise.resolve({ rows: [] })), pipeline: true };
    const refused: PipelinedStatementError[] = [];
    const client = pipelinedClient(fake as unknown as pg.PoolClient, (e) => refused.push(e));
    await client.query('INSERT INTO t VALUES (1)');
    await assert.rejects(client.query({ text: 'SELECT 1 FOR UPDATE' }), PipelinedStatementError);
    await assert.rejects(client.query({ text: 'SELECT 1', rows: 10 } as pg.QueryConfig), /rows/);
    const viaCallback = await new Promise<unknown>((resolve) => {
      client.query('SAVEPOINT x', (err: Error) => resolve(err));
    });
    assert.ok(viaCallback instanceof PipelinedStatementError);
    assert.deepEqual(sent, ['INSERT INTO t VALUES (1)']);
    assert.equal(refused.length, 3);
    assert.equal(client.pipeline, true);
  });
});
