/**
 * Dead workers' deliveries (src/jobs/dead-deliveries.ts) on a real Redis and BullMQ queue: an active
 * delivery whose owner listed itself and whose key ran out goes back to wait; one whose owner is
 * alive, or never listed itself (a replica of an earlier version), stays with its lock; dead owners
 * are delisted; a closed owner is delisted and left to BullMQ's lock. At a worker's start, the
 * deliveries of earlier starts under its name go back at once, though their keys live on.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { DeadDeliveries, lockOwner } from '../../src/jobs/dead-deliveries.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

/**
 * `body` with a queue of its own and a BullMQ worker taking its deliveries by hand (each active with
 * a lock held by the token it is given); then the queue is removed.
 */
async function withQueue(body: (q: { redis: Redis; queue: Queue; taker: Worker }) => Promise<void>): Promise<void> {
  const name = `dd${randomUUID().slice(0, 8)}`;
  const redis = new Redis(SHARED_REDIS_URL, { maxRetriesPerRequest: 1 });
  const queue = new Queue(name, { connection: redis });
  const takerConnection = new Redis(SHARED_REDIS_URL, { maxRetriesPerRequest: null });
  const taker = new Worker(name, null, { connection: takerConnection, lockDuration: 60_000 });
  try {
    await body({ redis, queue, taker });
  } finally {
    await taker.close(true);
    await takerConnection.quit();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await redis.quit();
  }
}

describe('dead workers’ deliveries (real Redis, BullMQ)', () => {
  it('reads the owner of a lock as BullMQ writes it', () => {
    assert.equal(lockOwner('5e0c7a53-8f0e-4a51-9a43-0b1d1c8b2f10:17'), '5e0c7a53-8f0e-4a51-9a43-0b1d1c8b2f10');
    assert.equal(lockOwner('no-counter'), 'no-counter');
  });

  it('moves back to wait only the deliveries of listed owners whose key ran out', { timeout: 30_000 }, () =>
    withQueue(async ({ redis, queue, taker }) => {
      const of = (owner: string, windowMs: number) =>
        new DeadDeliveries({ queue, redis, owner, name: `worker-${owner}`, windowMs });
      for (const n of [1, 2, 3]) await queue.add('run', { n });
      const dead = await taker.getNextJob('dead:1');
      const alive = await taker.getNextJob('alive:1');
      const old = await taker.getNextJob('old:1');
      assert.ok(dead && alive && old);
      await of('dead', 200).beat(); // its key runs out 200 ms from now
      await of('gone', 200).beat(); // and so does this one's, which holds nothing
      const aliveOwner = of('alive', 60_000);
      await aliveOwner.beat();
      await sleep(400);
      const me = of('me', 60_000);
      assert.equal(await me.sweep(), 1, "the dead owner's delivery");
      assert.equal(await queue.getJobState(dead.id!), 'waiting');
      assert.equal(await queue.getJobState(alive.id!), 'active');
      assert.equal(await queue.getJobState(old.id!), 'active', 'an owner that never listed itself is left to its lock');
      assert.deepEqual(
        (await redis.smembers(queue.toKey('cw-owners'))).sort(),
        ['alive'],
        'dead owners are delisted once swept, whether they held a delivery or not',
      );
      assert.equal(await me.sweep(), 0);
      await aliveOwner.forget();
      assert.equal(await me.sweep(), 0, 'a closed owner is left to its lock');
      assert.equal(await queue.getJobState(alive.id!), 'active');
    }),
  );

  it(
    "at its start, a worker moves back its earlier starts' deliveries at once, and no one else's",
    { timeout: 30_000 },
    () =>
      withQueue(async ({ redis, queue, taker }) => {
        const of = (owner: string, worker: string) =>
          new DeadDeliveries({ queue, redis, owner, name: worker, windowMs: 60_000 });
        for (const n of [1, 2, 3]) await queue.add('run', { n });
        const killed = await taker.getNextJob('start-1:1'); // r1's earlier start, killed: its key lives on
        const other = await taker.getNextJob('start-2:1'); // r2, alive
        const mine = await taker.getNextJob('start-3:1'); // r1's new start
        assert.ok(killed && other && mine);
        await of('start-1', 'r1').beat();
        await of('start-2', 'r2').beat();
        const again = of('start-3', 'r1');
        await again.beat();
        assert.equal(await again.sweep(), 0, 'every key is alive: the sweep moves nothing');
        assert.equal(await again.earlierStarts(), 1, "the earlier start's delivery");
        assert.equal(await queue.getJobState(killed.id!), 'waiting');
        assert.equal(await queue.getJobState(other.id!), 'active', "another worker's stays");
        assert.equal(await queue.getJobState(mine.id!), 'active', "this start's own stays");
        assert.deepEqual((await redis.smembers(queue.toKey('cw-owners'))).sort(), ['start-2', 'start-3']);
        assert.deepEqual(await redis.hgetall(queue.toKey('cw-owner-names')), { 'start-2': 'r2', 'start-3': 'r1' });
        assert.equal(await again.earlierStarts(), 0, 'delisted: looked at once');
        await again.forget();
        assert.deepEqual(
          await redis.hgetall(queue.toKey('cw-owner-names')),
          { 'start-2': 'r2' },
          'a closed owner is unnamed',
        );
      }),
  );
});
