/**
 * A group commit's callbacks run in turn, and one of them may end the turns (GroupItem.goOn; the
 * worker ends a group after a slow callback, callback-times.ts): the callbacks run so far commit
 * with their runs' completions, the later runs come out 'redo' without their callbacks called, and
 * redone alone each commits once. Real PostgreSQL.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type pg from 'pg';
import type { GroupOutcome } from '../../src/ledger/run-ledger.js';
import { groupCommitLedger } from '../support/group-commit-ledger.js';

describe('group commit turns (real PostgreSQL)', () => {
  const env = groupCommitLedger('turns');
  const { claim, effect, effects } = env;
  const kinds = (outcomes: GroupOutcome[]) => outcomes.map((o) => (o.kind === 'done' ? o.result.status : o.kind));

  it('a callback that ends the turns: the earlier ones commit, the later ones are redone alone, each effect once', async () => {
    const claims = await claim(5);
    const called: number[] = [];
    const outcomes = await env.ledger.runs.completeGroupInTransaction(
      claims.map((c, k) => ({
        claim: c,
        fn: async (tx: pg.PoolClient) => {
          called.push(k);
          await effect(tx, c);
          return k;
        },
        goOn: () => k !== 1, // the second run's callback ends the group
      })),
    );
    assert.deepEqual(called, [0, 1], 'the callbacks after the one that ended the group are not called');
    assert.deepEqual(kinds(outcomes), ['committed', 'committed', 'redo', 'redo', 'redo']);
    assert.equal(await effects(claims.slice(0, 2)), 2, "the group's effects committed");
    assert.equal(await effects(claims.slice(2)), 0, 'nothing of the others');
    for (const [k, c] of claims.entries())
      if (outcomes[k]!.kind === 'redo') {
        const alone = await env.ledger.runs.completeInTransaction(c, (tx) => effect(tx, c));
        assert.equal(alone.status, 'committed');
      }
    assert.equal(await effects(claims), 5, 'every run has its effect once (the table keys them by run)');
    const again = await env.ledger.runs.completeGroupInTransaction(
      claims.slice(0, 2).map((c) => ({ claim: c, fn: (tx: pg.PoolClient) => effect(tx, c) })),
    );
    assert.deepEqual(kinds(again), ['skipped', 'skipped'], 'completed with the group: a repeat is skipped');
  });

  it('a callback that ends the turns as the last of its group changes nothing', async () => {
    const claims = await claim(3);
    const outcomes = await env.ledger.runs.completeGroupInTransaction(
      claims.map((c, k) => ({ claim: c, fn: (tx: pg.PoolClient) => effect(tx, c), goOn: () => k !== 2 })),
    );
    assert.deepEqual(kinds(outcomes), ['committed', 'committed', 'committed']);
    assert.equal(await effects(claims), 3);
  });
});
