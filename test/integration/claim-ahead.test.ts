/**
 * How far a worker claims ahead of its handler slots: before any handler has ended, none (it
 * claims only runs that start at once, as a BullMQ worker takes no more jobs than its concurrency,
 * and hands a delivery's others back); after quick handlers, up to every place in hand
 * (claim-ahead.ts). After slow handlers, none either; after medium ones, fewer than one a slot
 * (slow-hand-back.test.ts). Real PostgreSQL, Redis and BullMQ.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { BullmqDelivery } from '../../src/jobs/bullmq-delivery.js';
import { Ledger } from '../../src/ledger/ledger.js';
import {
  commitTestRun,
  effectRegistry,
  effectsSuite,
  effectTally,
  inProcessWorker,
  runsInState,
  writeEffect,
} from '../support/effect-runs.js';

describe('claims ahead of the handler slots (real PostgreSQL, Redis, BullMQ)', () => {
  const env = effectsSuite();

  /**
   * `runs` runs of a job whose first `quick` runs return at once and the rest wait for a gate,
   * then write their effect; on one worker with 2 handler slots. Returns the runs claimed once the
   * count holds still (the gate shut), then every run's end and effect tally.
   */
  let year = 2035; // each call's runs at slots of their own (the suite shares one ledger)
  async function claimedWhileBusy(runs: number, quick: number) {
    const concurrency = 2;
    const at = year++;
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let started = 0;
    let waiting = 0;
    const registry = effectRegistry(async (ctx) => {
      if (++started <= quick) return;
      waiting++;
      await gate;
      await ctx.transaction((tx) => writeEffect(tx, ctx));
    });
    const ledger = new Ledger(env.db.pool);
    const namespace = `ca${randomUUID().slice(0, 8)}`;
    const delivery = new BullmqDelivery({ connection: env.redis, namespace, registry, ledger });
    const committed = [];
    for (let i = 0; i < runs; i++)
      committed.push(
        await commitTestRun(ledger, 'effect', {
          scheduledAt: new Date(Date.UTC(at, 0, 1, 0, i)),
          trigger: 'schedule',
        }),
      );
    const ids = committed.map((run) => run.runId);
    await delivery.enqueue(committed); // ten runs a delivery
    const worker = inProcessWorker({ namespace, registry, ledger, concurrency });
    const count = (state: string) => runsInState(env.db.pool, ids, state);
    await worker.start();
    let claimed = -1;
    try {
      // Claims settle within a few round trips; wait until the count holds still for a while.
      for (let stable = 0, deadline = Date.now() + 20_000; stable < 10 && Date.now() < deadline;) {
        await sleep(50);
        const now = await count('running');
        stable = now === claimed ? stable + 1 : 0;
        claimed = now;
      }
      assert.equal(waiting, concurrency, 'every handler slot runs a waiting handler');
      open();
      const deadline = Date.now() + 45_000;
      while ((await count('completed')) < runs && Date.now() < deadline) await sleep(50);
    } finally {
      open();
      await worker.close(1000);
      await delivery.queue.obliterate({ force: true }).catch(() => undefined);
      await delivery.close();
    }
    return { concurrency, claimed, completed: await count('completed'), effects: await effectTally(env.db.pool, ids) };
  }

  it(
    'handlers not ended yet: the slots busy and none claimed ahead, the rest back in the queue; then each run once',
    { timeout: 60_000 },
    async () => {
      const r = await claimedWhileBusy(60, 0);
      assert.equal(r.claimed, r.concurrency, 'the running runs only');
      assert.equal(r.completed, 60);
      assert.deepEqual(r.effects, { n: 60, runs: 60 }, 'one effect per run');
    },
  );

  it(
    'after quick handlers: more than 16 a slot claimed ahead, up to every place in hand (32 a slot); then each run once',
    { timeout: 60_000 },
    async () => {
      const r = await claimedWhileBusy(140, 40);
      // Quick handlers take well under a millisecond here, so every place in hand is claimed; a host
      // slow enough to make them take over 1.5 ms would claim fewer ahead, but still more than 16 a
      // slot while they take under 3 ms.
      assert.ok(
        r.claimed > r.concurrency + 16 * r.concurrency && r.claimed <= 32 * r.concurrency,
        `claimed ${r.claimed}: more than ${17 * r.concurrency} (16 a slot ahead), at most the ${32 * r.concurrency} places in hand`,
      );
      assert.equal(r.completed, 140);
      assert.deepEqual(r.effects, { n: 100, runs: 100 }, 'one effect per waiting run, none for the quick ones');
    },
  );
});
