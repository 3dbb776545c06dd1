import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { RunCoordinator } from 'node-cron';
import type pg from 'pg';
import { systemClock, type Clock } from '../clock.js';
import { InvalidArgumentError, StaleTokenError } from '../errors.js';
import type { Lease, LeaseBackend } from '../locks/lease.js';
import { Ledger } from '../ledger/ledger.js';
import { DEFAULT_LEASE_TTL_MS } from '../ledger/commit-stamps.js';

export interface NodeCronCoordinatorOptions {
  backend: LeaseBackend;
  /** Pool on the migrated cronwarden database (the ledger). */
  pool: pg.Pool;
  /** Schema of that ledger (see `cronwarden migrate`). Default "cronwarden". */
  schema?: string;
  /** Lease name shared by the processes. Default "node-cron". */
  leaseName?: string;
  /** This process's identity. Default host-pid-random. */
  holder?: string;
  /** Lease TTL. Default 10 s. */
  ttlMs?: number;
  clock?: Clock;
}

/** ISO instant at the end of node-cron's key: `${task name}:${slot.toISOString()}`. */
const ISO_LENGTH = '2026-01-01T00:00:00.000Z'.length;

/**
 * A node-cron 4 RunCoordinator backed by a cronwarden lease and ledger. Two layers, as in the
 * scheduler itself: only the lease holder runs slots (one process does the work while it is
 * healthy), and each slot is committed to the ledger under the holder's fencing token with the
 * unique (job, scheduled_at) key, so a slot runs at most once even across a failover, and a stale
 * holder's commit is refused by the fence.
 *
 *   import cron from 'node-cron';
 *   cron.setRunCoordinator(new NodeCronCoordinator({ backend, pool }));
 *   cron.schedule('* * * * * *', task, { name: 'report', distributed: true });   // name is required
 */
export class NodeCronCoordinator implements RunCoordinator {
  private readonly ledger: Ledger;
  private readonly holder: string;
  private readonly leaseName: string;
  private readonly ttlMs: number;
  private readonly clock: Clock;
  private lease: Lease | undefined;

  constructor(private readonly o: NodeCronCoordinatorOptions) {
    this.ledger = new Ledger(o.pool, o.schema);
    this.holder = o.holder ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 6)}`;
    this.leaseName = o.leaseName ?? 'node-cron';
    this.ttlMs = o.ttlMs ?? DEFAULT_LEASE_TTL_MS;
    this.ledger.useLeaseTtl(this.ttlMs);
    this.clock = o.clock ?? systemClock;
  }

  async shouldRun(key: string): Promise<boolean> {
    const { task, slot } = parseKey(key);
    const lease = await this.holdLease();
    if (!lease) return false;
    try {
      const { committed } = await this.ledger.fires.commitFires(
        [{ job: `node-cron:${task}`, scheduledAt: slot, trigger: 'schedule' }],
        {
          fenceResource: `node-cron/${this.leaseName}`,
          token: lease.token,
          replicaId: this.holder,
          stillLeading: () => this.clock.monotonic() < lease.deadline,
        },
      );
      return committed.length === 1;
    } catch (err) {
      if (err instanceof StaleTokenError) {
        this.lease = undefined;
        return false;
      }
      throw err;
    }
  }

  async onComplete(key: string): Promise<void> {
    const { task, slot } = parseKey(key);
    await this.ledger.runs.completeUnclaimed(`node-cron:${task}`, slot);
  }

  /** Give the lease up (call on shutdown so another process takes over at once). */
  async release(): Promise<void> {
    const lease = this.lease;
    this.lease = undefined;
    if (lease) await this.o.backend.release(lease).catch(() => {});
  }

  /** Take or extend the lease; re-entry by the holder extends it and keeps the token. */
  private async holdLease(): Promise<Lease | undefined> {
    const lease = await this.o.backend.tryAcquire({ name: this.leaseName, holder: this.holder, ttlMs: this.ttlMs });
    this.lease = lease ?? undefined;
    return this.lease;
  }
}

function parseKey(key: string): { task: string; slot: Date } {
  const task = key.slice(0, -(ISO_LENGTH + 1));
  const slot = new Date(key.slice(-ISO_LENGTH));
  if (!task || Number.isNaN(slot.getTime()) || key[key.length - ISO_LENGTH - 1] !== ':') {
    throw new InvalidArgumentError(
      `node-cron coordinator key "${key}" is not "<task name>:<ISO instant>"; give the task a name`,
    );
  }
  return { task, slot };
}
