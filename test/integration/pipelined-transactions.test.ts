/**
 * Pipelined ctx.transaction callbacks (src/ledger/run-transactions.ts, pipelined-client.ts) against
 * real PostgreSQL: a group's callbacks run at once on one connection in pipeline mode and commit
 * with their runs' completions; a statement that would let one run's read-then-write lose
 * another's is refused before it is sent, and nothing of a refused or failed group commits.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { bigint, pgSchema } from 'drizzle-orm/pg-core';
import { PipelinedStatementError } from '../../src/errors.js';
import { RunLedgerBatches } from '../../src/jobs/run-ledger-batches.js';
import type { Claim, GroupOutcome } from '../../src/ledger/run-ledger.js';
import { groupCommitLedger } from '../support/group-commit-ledger.js';

describe('pipelined ctx.transaction (real PostgreSQL)', () => {
  const env = groupCommitLedger('pipelined', async (pool, schema) => {
    await pool.query(`CREATE TABLE "${schema}".counter (id int PRIMARY KEY, n int NOT NULL)`);
    await pool.query(`INSERT INTO "${schema}".counter VALUES (1, 0)`);
  });
  const { claim, effect, effects } = env;
  const completed = async (claims: Claim[]) =>
    (
      await env.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${env.ledger.tables.runs} WHERE id = ANY($1) AND state = 'completed'`,
        [claims.map((c) => c.runId.toString())],
      )
    ).rows[0]!.n;
  const kinds = (outcomes: GroupOutcome[]) => outcomes.map((o) => (o.kind === 'done' ? o.result.status : o.kind));

  it("runs the group's callbacks at once, pipelined, and commits each effect with its completion", async () => {
    const claims = await claim(10);
    let started = 0;
    const startedAtFirstAnswer: number[] = [];
    const modes: boolean[] = [];
    const writes = { now: 0, atFirstAnswer: [] as number[], stop: () => {} };
    const outcomes = await env.ledger.runs.completeGroupInTransaction(
      claims.map((c) => ({
        claim: c,
        pipelined: true,
        fn: async (tx: pg.PoolClient) => {
          started++;
          if (started === 1) writes.stop = countSocketWrites(tx, () => writes.now++);
          modes.push(tx.pipeline);
          await effect(tx, c);
          startedAtFirstAnswer.push(started);
          writes.atFirstAnswer.push(writes.now);
          return c.runId;
        },
      })),
    );
    writes.stop();
    assert.deepEqual(kinds(outcomes), Array(10).fill('committed'));
    assert.deepEqual(
      outcomes.map((o) => o.kind === 'done' && o.result.status === 'committed' && o.result.value),
      claims.map((c) => c.runId),
    );
    // Every callback had sent its INSERT before the first one's answer came back, all ten in one
    // socket write (one each before inOneWrite).
    assert.equal(startedAtFirstAnswer[0], 10);
    assert.equal(writes.atFirstAnswer[0], 1);
    assert.deepEqual(modes, Array(10).fill(true));
    assert.equal(await effects(claims), 10);
    assert.equal(await completed(claims), 10);
    // The connection went back to the pool out of pipeline mode.
    const client = await env.pool.connect();
    try {
      assert.equal(client.pipeline, false);
    } finally {
      client.release();
    }
  });

  it('drizzle on the pipelined client: its statements go out pipelined and commit with the completions', async () => {
    const claims = await claim(5);
    const effects_ = pgSchema(env.db.schema).table('effects', { run: bigint('run', { mode: 'bigint' }).primaryKey() });
    const outcomes = await env.ledger.runs.completeGroupInTransaction(
      claims.map((c) => ({
        claim: c,
        pipelined: true,
        fn: async (tx: pg.PoolClient) => {
          await drizzle(tx).insert(effects_).values({ run: c.runId });
        },
      })),
    );
    assert.deepEqual(kinds(outcomes), Array(5).fill('committed'));
    assert.equal(await effects(claims), 5);
    assert.equal(await completed(claims), 5);
  });

  it('refuses a locking read-then-write, which would lose updates between the runs of one group', async () => {
    const claims = await claim(10);
    const counter = async () =>
      (await env.pool.query<{ n: number }>(`SELECT n FROM "${env.db.schema}".counter WHERE id = 1`)).rows[0]!.n;
    const increment = async (tx: pg.PoolClient) => {
      const { rows } = await tx.query<{ n: number }>(
        `SELECT n FROM "${env.db.schema}".counter WHERE id = 1 FOR UPDATE`,
      );
      await tx.query(`UPDATE "${env.db.schema}".counter SET n = $1 WHERE id = 1`, [rows[0]!.n + 1]);
    };
    const before = await counter();
    const outcomes = await env.ledger.runs.completeGroupInTransaction(
      claims.map((c) => ({ claim: c, pipelined: true, fn: increment })),
    );
    assert.deepEqual(kinds(outcomes), Array(10).fill('failed'));
    for (const o of outcomes) {
      assert.ok(o.kind === 'failed' && o.error instanceof PipelinedStatementError, JSON.stringify(o.kind));
      assert.match((o.error as Error).message, /FOR UPDATE/);
    }
    assert.equal(await counter(), before);
    assert.equal(await completed(claims), 0);
    // The same callbacks in turn (not pipelined) in one group: every increment counts.
    const again = await env.ledger.runs.completeGroupInTransaction(claims.map((c) => ({ claim: c, fn: increment })));
    assert.deepEqual(kinds(again), Array(10).fill('committed'));
    assert.equal(await counter(), before + 10);
  });

  it('alone, a pipelined callback is refused the same (a group of one, group commit off): a job fails alike at any load', async () => {
    const locking = (c: Claim) => async (tx: pg.PoolClient) => {
      await tx.query(`SELECT n FROM "${env.db.schema}".counter WHERE id = 1 FOR UPDATE`);
      await effect(tx, c);
    };
    const [one] = await claim(1);
    const [outcome] = await env.ledger.runs.completeGroupInTransaction([
      { claim: one!, pipelined: true, fn: locking(one!) },
    ]);
    assert.ok(outcome!.kind === 'failed' && outcome!.error instanceof PipelinedStatementError, kinds([outcome!])[0]);
    const ungrouped = new RunLedgerBatches(env.ledger.runs, { maxGroup: 1 });
    const [two, three, direct] = await claim(3);
    await assert.rejects(
      ungrouped.completeInTransaction(two!, locking(two!), { pipelined: true }),
      PipelinedStatementError,
    );
    // The ledger itself refuses it, whoever calls it alone.
    await assert.rejects(
      env.ledger.runs.completeInTransaction(direct!, locking(direct!), { pipelined: true }),
      PipelinedStatementError,
    );
    // Caught by the callback, the refusal still fails the run.
    await assert.rejects(
      ungrouped.completeInTransaction(
        three!,
        async (tx) => {
          await tx.query('SAVEPOINT mine').catch(() => undefined);
          await effect(tx, three!);
        },
        { pipelined: true },
      ),
      PipelinedStatementError,
    );
    assert.equal(await effects([one!, two!, three!, direct!]), 0);
    assert.equal(await completed([one!, two!, three!, direct!]), 0);
    // Without pipelined, the same callback alone commits.
    const [four] = await claim(1);
    assert.equal((await ungrouped.completeInTransaction(four!, locking(four!))).status, 'committed');
    assert.equal(await effects([four!]), 1);
  });

  it('a callback that catches its refusal still fails its run; the others are redone, nothing committed', async () => {
    const claims = await claim(4);
    const outcomes = await env.ledger.runs.completeGroupInTransaction(
      claims.map((c, i) => ({
        claim: c,
        pipelined: true,
        fn: async (tx: pg.PoolClient) => {
          if (i === 2) await tx.query('SAVEPOINT mine').catch(() => undefined);
          await effect(tx, c);
        },
      })),
    );
    assert.deepEqual(kinds(outcomes), ['redo', 'redo', 'failed', 'redo']);
    assert.equal(await effects(claims), 0);
    assert.equal(await completed(claims), 0);
  });

  it('waits for every callback before rolling back: a slow one never writes outside the transaction', async () => {
    const claims = await claim(3);
    const outcomes = await env.ledger.runs.completeGroupInTransaction(
      claims.map((c, i) => ({
        claim: c,
        pipelined: true,
        fn: async (tx: pg.PoolClient) => {
          if (i === 0) throw new Error('handler failed');
          if (i === 1) await sleep(100);
          await effect(tx, c).catch(() => undefined);
        },
      })),
    );
    assert.deepEqual(kinds(outcomes), ['redo', 'redo', 'redo']);
    await sleep(150); // past the slow callback's INSERT
    assert.equal(await effects(claims), 0);
    assert.equal(await completed(claims), 0);
  });

  it('through the batches: pipelined and in-turn callbacks at once, each effect once, refusals redone alone or failed', async () => {
    const batches = new RunLedgerBatches(env.ledger.runs);
    const claims = await claim(20);
    const results = await Promise.allSettled(
      claims.map((c, i) => batches.completeInTransaction(c, (tx) => effect(tx, c), { pipelined: i % 2 === 0 })),
    );
    assert.ok(results.every((r) => r.status === 'fulfilled' && r.value.status === 'committed'));
    assert.equal(await effects(claims), 20);
    assert.equal(await completed(claims), 20);
    // A cursor in a pipelined callback is refused: the run fails, its neighbour is redone alone.
    const [a, b] = await claim(2);
    const [refused, redone] = await Promise.allSettled([
      batches.completeInTransaction(a!, (tx) => tx.query({ text: 'SELECT 1', rows: 1 } as pg.QueryConfig), {
        pipelined: true,
      }),
      batches.completeInTransaction(b!, (tx) => effect(tx, b!), { pipelined: true }),
    ]);
    assert.equal(redone.status, 'fulfilled');
    assert.equal(await effects([b!]), 1);
    assert.equal(refused.status, 'rejected');
    assert.equal(await completed([a!]), 0);
  });
});

/** Count the writes to `client`'s socket (each _write or _writev: one system call) until the returned stop. */
function countSocketWrites(client: pg.PoolClient, onWrite: () => void): () => void {
  type Writes = { _write: (...a: unknown[]) => unknown; _writev: (...a: unknown[]) => unknown };
  const socket = (client as unknown as pg.Client).connection.stream as unknown as Writes;
  const { _write, _writev } = socket;
  socket._write = function (this: unknown, ...a: unknown[]) {
    onWrite();
    return _write.apply(this, a);
  };
  socket._writev = function (this: unknown, ...a: unknown[]) {
    onWrite();
    return _writev.apply(this, a);
  };
  return () => Object.assign(socket, { _write, _writev });
}
