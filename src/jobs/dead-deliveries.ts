/**
 * Deliveries held by a dead worker. BullMQ frees a delivery whose worker died only once its lock
 * runs out (workerLockMs, 30 s by default), so the runs of it that worker had not claimed yet (a
 * burst's later claims still in flight, runs waiting for a place) waited that long: the ledger
 * knows a run's worker only from its claim (worker-liveness.ts hands those out after the window).
 *
 * So each worker keeps a key alive in Redis under its BullMQ worker id, whose lock on a delivery
 * holds `<worker id>:<n>`, with its liveness window as TTL, and lists that id among the queue's
 * owners. At each liveness poll it moves the active deliveries whose listed owner's key has run out
 * back to the front of the wait list, with the lock's own token, as the owner would hand them back
 * (Job.moveToWait checks the token, so a delivery that changed hands meanwhile stays). Any worker
 * then takes them: the runs of them already claimed are the orphan poll's, the others are claimed
 * by whoever takes them. An owner never listed (a replica of an earlier version during a rolling
 * upgrade) is left to BullMQ's lock. A worker only paused past its window loses its deliveries the
 * same way, as BullMQ's own stalled check would take them after its lock: the ledger claims each
 * run once, so the second delivery is harmless.
 *
 * A worker killed and started again under its name (a supervisor's restart) beats under a new
 * BullMQ id, while its earlier start's key lives on for up to a window. Each owner is listed with
 * its worker's name, so at its start a worker moves back at once the deliveries of the other owners
 * listed under its own name: nothing of this start's can be among them, as worker-liveness.ts
 * claims again the runs an earlier start left running.
 */
import { Job, type Queue } from 'bullmq';
import type { Redis } from 'ioredis';

/** BullMQ's lock value, `<worker id>:<n>`: the worker id. */
export function lockOwner(token: string): string {
  const at = token.lastIndexOf(':');
  return at < 0 ? token : token.slice(0, at);
}

export interface DeadDeliveriesOptions {
  /** The deliveries' queue (for its keys and jobs). */
  queue: Queue;
  /** A connection to the queue's Redis. */
  redis: Redis;
  /** This worker's BullMQ worker id. */
  owner: string;
  /** This worker's name (the replica's id): the same across its starts, unlike `owner`. */
  name: string;
  /** The liveness window: an owner whose key was not renewed for this long is dead. */
  windowMs: number;
}

export class DeadDeliveries {
  constructor(private readonly o: DeadDeliveriesOptions) {}

  private get ownersKey(): string {
    return this.o.queue.toKey('cw-owners');
  }

  /** Each listed owner's worker name. */
  private get namesKey(): string {
    return this.o.queue.toKey('cw-owner-names');
  }

  private aliveKey(owner: string): string {
    return this.o.queue.toKey(`cw-alive:${owner}`);
  }

  /** This worker is alive for another window (called a few times a window). */
  async beat(): Promise<void> {
    await this.o.redis
      .multi()
      .set(this.aliveKey(this.o.owner), '1', 'PX', this.o.windowMs)
      .sadd(this.ownersKey, this.o.owner)
      .hset(this.namesKey, this.o.owner, this.o.name)
      .exec();
  }

  /** Closing: delisted, so what it still holds is BullMQ's lock's business, as before. */
  async forget(): Promise<void> {
    await this.o.redis
      .multi()
      .del(this.aliveKey(this.o.owner))
      .srem(this.ownersKey, this.o.owner)
      .hdel(this.namesKey, this.o.owner)
      .exec();
  }

  /**
   * Move the active deliveries of listed owners whose key ran out back to wait, and delist those
   * owners (whether they held any: a dead worker's id is looked at once); how many moved.
   */
  async sweep(): Promise<number> {
    const { redis } = this.o;
    const others = (await redis.smembers(this.ownersKey)).filter((o) => o !== this.o.owner);
    if (others.length === 0) return 0;
    const asked = redis.pipeline();
    for (const owner of others) asked.exists(this.aliveKey(owner));
    const alive = ((await asked.exec()) ?? []).map(([err, n]) => err !== null || n !== 0);
    const dead = new Set(others.filter((_, i) => !alive[i]));
    if (dead.size === 0) return 0;
    return this.moveBack(dead);
  }

  /**
   * At this worker's start: move back the deliveries of earlier starts of it (the other owners
   * listed under its name), and delist them; how many moved.
   */
  async earlierStarts(): Promise<number> {
    const names = await this.o.redis.hgetall(this.namesKey);
    const earlier = Object.keys(names).filter((owner) => names[owner] === this.o.name && owner !== this.o.owner);
    return earlier.length === 0 ? 0 : this.moveBack(new Set(earlier));
  }

  /** The active deliveries locked by `dead` owners back to wait, and those owners delisted. */
  private async moveBack(dead: Set<string>): Promise<number> {
    const { queue, redis } = this.o;
    let moved = 0;
    const ids = await redis.lrange(queue.keys.active!, 0, -1);
    const locks = ids.length > 0 ? await redis.mget(ids.map((id) => `${queue.toKey(id)}:lock`)) : [];
    for (const [i, id] of ids.entries()) {
      const token = locks[i];
      if (!token || !dead.has(lockOwner(token))) continue;
      const job = await Job.fromId(queue, id);
      // Refused when the lock changed hands since it was read (BullMQ's stalled check, another sweep).
      const back = await job?.moveToWait(token).then(
        () => true,
        () => false,
      );
      if (back) moved++;
    }
    await redis
      .multi()
      .srem(this.ownersKey, ...dead)
      .hdel(this.namesKey, ...dead)
      .exec();
    return moved;
  }
}
