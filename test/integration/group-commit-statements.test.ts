/**
 * The group commit's check and completion are statements PREPAREd once per connection and planned
 * by key (src/ledger/sql-prepared.ts), against real PostgreSQL: the handlers' own statements in
 * the same transaction are planned as usual, and a handler that drops the connection's prepared
 * statements costs a redo, never a lost or doubled effect.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type pg from 'pg';
import { groupCommitLedger } from '../support/group-commit-ledger.js';

describe('group commit statements (real PostgreSQL)', () => {
  const env = groupCommitLedger('group');
  const { claim, effect, effects } = env;

  it("the handlers' statements run with the connection's usual planner settings", async () => {
    for (let round = 0; round < 7; round++) {
      const claims = await claim(3);
      const seen: string[] = [];
      const outcomes = await env.ledger.runs.completeGroupInTransaction(
        claims.map((c) => ({
          claim: c,
          fn: async (tx: pg.PoolClient) => {
            const r = await tx.query<{ s: string; h: string; m: string; p: string }>(
              `SELECT current_setting('enable_seqscan') AS s, current_setting('enable_hashjoin') AS h,
                 current_setting('enable_mergejoin') AS m, current_setting('plan_cache_mode') AS p`,
            );
            seen.push(Object.values(r.rows[0]!).join(' '));
            await effect(tx, c);
          },
        })),
      );
      assert.ok(outcomes.every((o) => o.kind === 'done' && o.result.status === 'committed'));
      assert.deepEqual(seen, Array(3).fill('on on on auto'));
      assert.equal(await effects(claims), 3);
    }
    // And after the transaction, on the same connection.
    const after = await env.pool.query<{ s: string }>(`SELECT current_setting('enable_seqscan') AS s`);
    assert.equal(after.rows[0]!.s, 'on');
  });

  it('a handler that deallocates the prepared statements makes its group redo, each effect once', async () => {
    const claims = await claim(4);
    const calls = new Map<bigint, number>();
    const outcomes = await env.ledger.runs.completeGroupInTransaction(
      claims.map((c, i) => ({
        claim: c,
        fn: async (tx: pg.PoolClient) => {
          calls.set(c.runId, (calls.get(c.runId) ?? 0) + 1);
          if (i === 1 && calls.get(c.runId) === 1) await tx.query('DEALLOCATE ALL');
          await effect(tx, c);
          return c.runId;
        },
      })),
    );
    // The completion's EXECUTE found no statement: the group rolled back, each run to be redone alone.
    assert.deepEqual(
      outcomes.map((o) => o.kind),
      ['redo', 'redo', 'redo', 'redo'],
    );
    assert.equal(await effects(claims), 0);
    for (const c of claims) {
      const alone = await env.ledger.runs.completeInTransaction(c, async (tx) => {
        calls.set(c.runId, (calls.get(c.runId) ?? 0) + 1);
        await effect(tx, c);
      });
      assert.equal(alone.status, 'committed');
    }
    assert.equal(await effects(claims), 4);
    assert.deepEqual([...calls.values()], [2, 2, 2, 2]);
    // The next group prepares them again and commits in one go.
    const next = await claim(2);
    const again = await env.ledger.runs.completeGroupInTransaction(
      next.map((c) => ({ claim: c, fn: (tx) => effect(tx, c) })),
    );
    assert.ok(again.every((o) => o.kind === 'done' && o.result.status === 'committed'));
    assert.equal(await effects(next), 2);
  });
});
