/**
 * Slow ctx.transaction callbacks do not wait for each other in a group commit: a callback that took
 * longer than SLOW_CALLBACK_MS ends its group (the runs after it are redone alone, side by side),
 * and a job whose callbacks are known to be slow commits each alone from the call
 * (callback-times.ts). Found with a worker killed mid-batch: ten runs whose callbacks worked 1 s in
 * one group committed one a second. Real PostgreSQL, Redis and BullMQ.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { Ledger } from '../../src/ledger/ledger.js';
import {
  effectDelivery,
  effectRegistry,
  effectsSuite,
  effectTally,
  inProcessWorker,
  runsInState,
  writeEffect,
} from '../support/effect-runs.js';

const CONCURRENCY = 10;
/** How long each callback works inside its transaction: far over SLOW_CALLBACK_MS. */
const CALLBACK_MS = 300;

/** Polls (up to 30 s) until `check` holds; fails with `what` if it never does. */
async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; await sleep(20)) if (await check()) return;
  assert.fail(what);
}

describe('slow ctx.transaction callbacks run side by side (real PostgreSQL, Redis, BullMQ)', () => {
  const env = effectsSuite();

  it(
    'a group ends at a slow callback and the rest commit alone at once; then the job commits each alone; each run once',
    { timeout: 90_000 },
    async () => {
      const namespace = `sc${randomUUID().slice(0, 8)}`;
      const { deliverMany, close } = effectDelivery(env, namespace);
      // Connections for every run's transaction at once, besides the claims and outcomes.
      const pool = new pg.Pool({ connectionString: env.db.url, max: CONCURRENCY + 5 });
      let inside = 0;
      let most = 0;
      const registry = effectRegistry((ctx) =>
        ctx.transaction(async (tx) => {
          most = Math.max(most, ++inside);
          try {
            await sleep(CALLBACK_MS);
            await writeEffect(tx, ctx);
          } finally {
            inside--;
          }
        }),
      );
      const worker = inProcessWorker({ namespace, registry, ledger: new Ledger(pool), concurrency: CONCURRENCY });
      /** Deliver a wave of runs, wait until every one completed; the most callbacks at once. */
      const wave = async (year: number) => {
        most = 0;
        const ids = await deliverMany(CONCURRENCY, new Date(Date.UTC(year, 0, 1)));
        await until(async () => (await runsInState(env.db.pool, ids, 'completed')) === ids.length, 'the wave ran');
        assert.deepEqual(await effectTally(env.db.pool, ids), { n: ids.length, runs: ids.length }, 'one effect a run');
        return most;
      };
      try {
        await worker.start();
        // Not known slow yet: the wave's callbacks go into a group (at most two in flight, each
        // running its callbacks in turn: before, at most 2 at once); the first ends it.
        const first = await wave(2037);
        assert.ok(first > 2, `${first} callbacks at once: the group's others redone side by side`);
        // Known slow: each alone from the call, all at once.
        const second = await wave(2038);
        assert.equal(second, CONCURRENCY, 'every run of the second wave in a transaction of its own at once');
      } finally {
        await worker.close(1000);
        await close();
        await pool.end();
      }
    },
  );
});
