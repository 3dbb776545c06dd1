/**
 * A worker whose handlers take longer than WAIT_AHEAD_MS does not sit on runs another replica could
 * start: with no handler slot free, it claims of a delivery only the runs that may wait for one
 * (none with slow handlers, fewer than one a slot with medium ones), hands the rest back to the
 * queue, and fetches again only once a run would be startable (ClaimAhead.handsBack,
 * BullmqWorker.process). Found from outside: with handlers working 1 s, runs waited 1-4 s in one
 * replica's deliveries while the others had free slots. Real PostgreSQL, Redis and BullMQ, two
 * workers in one process.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { BullmqWorker } from '../../src/jobs/bullmq-worker.js';
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

/** Handler slots of each worker. */
const CONCURRENCY = 2;
/**
 * How long A's first two handlers take, and how many runs of a delivery A then claims with both
 * slots busy. 150 ms: a slot frees every 75 ms, more than WAIT_AHEAD_MS (50): none may wait. 70 ms:
 * a slot frees every 35 ms, but a run a slot would wait 70 ms: one run over the two slots may wait
 * (before, 8 a slot waited, the whole delivery).
 */
const CASES = [
  { label: 'slow', handlerMs: 150, mayWait: 0 },
  { label: 'medium', handlerMs: 70, mayWait: 1 },
];

/** Polls (up to 20 s) until `check` holds; fails with `what` if it never does. */
async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; await sleep(20)) if (await check()) return;
  assert.fail(what);
}

describe('a worker with slow handlers hands back what it cannot start (real PostgreSQL, Redis, BullMQ)', () => {
  let year = 2036; // each case's runs at slots of their own (the suite shares one ledger)
  const env = effectsSuite();

  for (const { label, handlerMs, mayWait } of CASES)
    it(
      `${label} handlers (${handlerMs} ms), its slots busy: it claims ${mayWait} of a delivery, the rest go back to the queue and a replica with free slots runs them; each run once`,
      { timeout: 60_000 },
      async () => {
        const at = year++;
        const namespace = `hb${randomUUID().slice(0, 8)}`;
        const { deliverMany, delivery, close } = effectDelivery(env, namespace);
        let open!: () => void;
        const gate = new Promise<void>((resolve) => (open = resolve));
        const ranOn = { A: 0, B: 0 };
        const worker = (name: 'A' | 'B', handle: () => Promise<void>) => {
          const registry = effectRegistry(async (ctx) => {
            ranOn[name]++;
            await handle();
            await ctx.transaction((tx) => writeEffect(tx, ctx));
          });
          const ledger = new Ledger(env.db.pool);
          return inProcessWorker({ namespace, registry, ledger, concurrency: CONCURRENCY, replicaId: name });
        };
        // A: its first two handlers work handlerMs (it learns how long they take), the next wait.
        let onA = 0;
        const a = worker('A', () => (++onA <= 2 ? sleep(handlerMs) : gate));
        const b = worker('B', async () => {});
        const started: BullmqWorker[] = [];
        try {
          await a.start();
          started.push(a);
          const taught = await deliverMany(2, new Date(Date.UTC(at, 0, 1)));
          await until(async () => (await runsInState(env.db.pool, taught, 'completed')) === 2, 'A ran its first runs');
          const held = await deliverMany(2, new Date(Date.UTC(at, 1, 1)));
          await until(async () => (await runsInState(env.db.pool, held, 'running')) === 2, 'A has both slots busy');
          const later = await deliverMany(8, new Date(Date.UTC(at, 2, 1))); // one delivery of 8
          // A fetches it, finds no slot free, claims the runs that may wait and hands the rest back.
          await until(
            async () => (await delivery.queue.getWaitingCount()) === 1 && (await delivery.queue.getActiveCount()) === 0,
            'the delivery back in the wait list',
          );
          await sleep(200); // and it does not fetch it again while no run would be startable
          assert.equal(await delivery.queue.getWaitingCount(), 1, 'the delivery still waits');
          assert.equal(await runsInState(env.db.pool, later, 'running'), mayWait, `A claimed ${mayWait} of them`);
          assert.equal(ranOn.A, 4, 'A started only its own four');
          await b.start();
          started.push(b);
          const handedBack = 8 - mayWait;
          await until(
            async () => (await runsInState(env.db.pool, later, 'completed')) === handedBack,
            'B ran the delivery',
          );
          assert.equal(ranOn.B, handedBack, `B ran the ${handedBack} handed back while A was busy`);
          open();
          const all = [...taught, ...held, ...later];
          await until(async () => (await runsInState(env.db.pool, all, 'completed')) === 12, 'every run completed');
          assert.deepEqual(await effectTally(env.db.pool, all), { n: 12, runs: 12 }, 'one effect per run');
          assert.deepEqual(ranOn, { A: 4 + mayWait, B: handedBack }, 'no run started twice');
        } finally {
          open();
          await Promise.all(started.map((w) => w.close(1000)));
          await close();
        }
      },
    );
});
