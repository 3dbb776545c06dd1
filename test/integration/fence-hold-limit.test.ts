/**
 * A replica frozen inside a transaction that holds the scheduler's fence row (SIGSTOP, a paused
 * VM) must not keep the next leader off the fence past its lease TTL: each such transaction opens
 * with idle_in_transaction_session_timeout (fenceHoldLimit), so PostgreSQL ends the frozen session
 * and its locks go with it. Frozen here = the client stops sending right after the statement that
 * took the fence, which is all the server sees of a stopped process.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Ledger } from '../../src/ledger/ledger.js';
import { freezingPool } from '../support/freezing-pool.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

const FENCE = 'scheduler/hold';
const LIMIT_MS = 1000;

describe('a replica frozen while it holds the scheduler fence (real PostgreSQL)', () => {
  let db: TestDatabase;
  let ledger: Ledger;
  let token = 1n;
  const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));
  const leader = (t: bigint) => ({ fenceResource: FENCE, token: t, replicaId: 'frozen', stillLeading: () => true });

  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool, db.schema);
    await ledger.fires.advanceFence(FENCE, token);
  });
  after(async () => {
    await db.drop();
  });

  const holders: { name: string; job?: string; hold: (frozen: Ledger, t: bigint) => Promise<unknown> }[] = [
    {
      name: "the leader's fire commit",
      job: 'fires',
      hold: (l, t) => l.fires.commitFires([{ job: 'fires', scheduledAt: at(1), trigger: 'schedule' }], leader(t)),
    },
    {
      name: "a stand-in's commit (FOR SHARE)",
      job: 'stand-in',
      hold: (l) =>
        l.fires.commitStandInFires([{ job: 'stand-in', scheduledAt: at(2), trigger: 'schedule' }], {
          fenceResource: FENCE,
          replicaId: 'frozen',
        }),
    },
    { name: 'a retry', hold: (l, t) => l.fires.retryRun(987_654n, leader(t)) },
    { name: 'lifting expired pauses', hold: (l, t) => l.fires.expirePauses(Date.now(), { resource: FENCE, token: t }) },
    {
      name: 'opening schedule eras',
      hold: (l, t) =>
        l.fires.openNewEras(
          [{ job: 'eras', expression: '* * * * * *', timezone: 'UTC', dst: 'skip-forward', from: at(3) }],
          leader(t),
        ),
    },
    {
      name: 'a one-off run',
      job: 'once',
      hold: (l, t) => l.schedules.commitOnce({ job: 'once', at: at(4), key: 'k', payload: null }, leader(t)),
    },
  ];

  for (const h of holders) {
    it(`${h.name}: the next leader advances the fence once the frozen session sat idle a lease TTL`, async () => {
      const f = freezingPool(db.url);
      const frozenLedger = new Ledger(f.pool, db.schema);
      frozenLedger.useLeaseTtl(LIMIT_MS);
      const held = h.hold(frozenLedger, token).then(
        () => 'committed',
        (err: Error) => err,
      );
      try {
        await f.hasFrozen;
        const started = Date.now();
        const next = token + 1n;
        const advanced = await Promise.race([
          ledger.fires.advanceFence(FENCE, next).then(() => true),
          new Promise<false>((r) => setTimeout(() => r(false), 15_000).unref()),
        ]);
        const waitedMs = Date.now() - started;
        assert.equal(advanced, true, 'the next leader is still waiting for the frozen session after 15 s');
        assert.ok(waitedMs >= LIMIT_MS * 0.8, `the fence was held by the frozen session (waited ${waitedMs} ms)`);
        token = next;
      } finally {
        f.thaw();
      }
      const outcome = await held;
      assert.ok(outcome instanceof Error, `the frozen transaction was ended, not ${String(outcome)}`);
      if (h.job !== undefined) {
        const runs = await db.pool.query(`SELECT id FROM ${ledger.tables.runs} WHERE job = $1`, [h.job]);
        assert.equal(runs.rowCount, 0, 'nothing the frozen transaction wrote was committed');
      }
      await f.pool.end();
    });
  }
});
