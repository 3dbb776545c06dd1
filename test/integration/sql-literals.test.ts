/**
 * The literal builders for statements sent without parameters (simple-protocol round trips that
 * EXECUTE prepared statements): PostgreSQL reads back exactly what went in.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { sqlBoolArray, sqlInt, sqlIntArray, sqlText, sqlTextArray } from '../../src/ledger/transaction.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

describe('SQL literals (real PostgreSQL)', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  before(async () => {
    db = await createTestDatabase();
    pool = new pg.Pool({ connectionString: db.url, max: 1 });
  });
  after(async () => {
    await pool.end();
    await db.drop();
  });

  it('a string and a text array keep quotes, backslashes, commas, braces, NULL-looking words and unicode', async () => {
    const xs = [
      'plain',
      `it's`,
      'a "quoted" job',
      'back\\slash',
      'a,b',
      '{braces}',
      'NULL',
      ' spaced ',
      '',
      'ünï€ode',
      "\\'",
      'a stack\n    at line 2\tand a tab',
    ];
    const res = await pool.query<{ a: string[] }>(`SELECT (${sqlTextArray(xs)})::text[] AS a`);
    assert.deepEqual(res.rows[0]!.a, xs);
    for (const x of xs) {
      const one = await pool.query<{ s: string }>(`SELECT ${sqlText(x)}::text AS s`);
      assert.equal(one.rows[0]!.s, x);
      assert.equal(sqlText(x), pg.escapeLiteral(x), 'the same literal as escapeLiteral makes');
    }
    const none = await pool.query<{ a: string[] }>(`SELECT (${sqlTextArray([])})::text[] AS a`);
    assert.deepEqual(none.rows[0]!.a, []);
    const nulls = await pool.query<{ a: (string | null)[] }>(
      `SELECT (${sqlTextArray([null, 'NULL', null, ''])})::text[] AS a`,
    );
    assert.deepEqual(nulls.rows[0]!.a, [null, 'NULL', null, ''], 'null is SQL NULL, the word NULL a string');
  });

  it('integers and integer arrays, and nothing else', async () => {
    const ids = [1n, 9007199254740993n, 0n, -5n];
    const res = await pool.query<{ a: string[]; n: string }>(
      `SELECT (${sqlIntArray(ids)})::bigint[]::text[] AS a, ${sqlInt(42)}::text AS n`,
    );
    assert.deepEqual(res.rows[0]!.a, ids.map(String));
    assert.equal(res.rows[0]!.n, '42');
    assert.throws(() => sqlInt(1.5), RangeError);
    assert.throws(() => sqlIntArray([Number.NaN]), RangeError);
    const nulls = await pool.query<{ a: (string | null)[] }>(
      `SELECT (${sqlIntArray([null, 7, null])})::bigint[]::text[] AS a`,
    );
    assert.deepEqual(nulls.rows[0]!.a, [null, '7', null]);
  });

  it('boolean arrays', async () => {
    const res = await pool.query<{ a: boolean[] }>(`SELECT (${sqlBoolArray([true, false, false])})::bool[] AS a`);
    assert.deepEqual(res.rows[0]!.a, [true, false, false]);
    const none = await pool.query<{ a: boolean[] }>(`SELECT (${sqlBoolArray([])})::bool[] AS a`);
    assert.deepEqual(none.rows[0]!.a, []);
  });
});
