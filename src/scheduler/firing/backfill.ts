/**
 * Backfill: fire every slot of a job in [from, to] that the ledger does not hold yet, on the
 * leader, under its fence, at a bounded rate. The unique (job, scheduled_at) key makes it
 * idempotent: a second backfill of the same range, or one run on two replicas at once (only the
 * leader's fence passes), adds nothing. One call handles at most `limit` slots and says where to
 * continue, so a long range is a loop of short requests (the CLI draws its progress between them)
 * that simply resumes on the next leader after a failover.
 */
import type { Logger } from 'pino';
import type { Clock } from '../../clock.js';
import { InvalidArgumentError, NotLeaderError, StaleTokenError } from '../../errors.js';
import type { FireLedger, FireRequest } from '../../ledger/fire-ledger.js';
import type { Leadership } from './fire-loop.js';
import type { RunDelivery } from './run-delivery.js';
import type { ScheduledJobs } from '../../cron/scheduled-job.js';

/** Slots in one backfill range, at most: a bigger range is refused (split it). */
export const MAX_BACKFILL_SLOTS = 100_000;
/** Slots handled per call by default, and at most. */
export const BACKFILL_LIMIT = 500;
export const MAX_BACKFILL_LIMIT = 5000;
/** Default and highest rate, slots per second. */
export const BACKFILL_RATE = 200;
export const MAX_BACKFILL_RATE = 2000;
/** Slots per commit transaction. */
const CHUNK = 100;

export interface BackfillRequest {
  job: string;
  from: Date;
  to: Date;
  /** Slots handled by this call at most (default 500). */
  limit?: number;
  /** Slots per second at most (default 200). */
  ratePerSec?: number;
}

export interface BackfillStep {
  job: string;
  /** Slots in the whole range [from, to]. */
  total: number;
  /** Slots of the range this call looked at. */
  processed: number;
  /** Of those, how many this call committed. */
  inserted: number;
  /** Of those, how many the ledger already held (fired, backfilled, or refused for their version). */
  existing: number;
  /** Where the next call continues (its `from`), or null when the range is done. */
  next: Date | null;
}

export interface BackfillerOptions {
  registry: ScheduledJobs;
  /** The fire loop's ledger (with runtime schedule fires named by version). */
  ledger: Pick<FireLedger, 'commitFires' | 'markEnqueued'>;
  delivery: Pick<RunDelivery, 'enqueue'>;
  leadership: Leadership;
  clock: Clock;
  logger: Logger;
  replicaId: string;
  fenceResource: string;
}

export class Backfiller {
  constructor(private readonly o: BackfillerOptions) {}

  /** Validate a range: a known job, from < to, not in the future, and not too many slots. */
  slots(r: BackfillRequest): number[] {
    const job = this.o.registry.require(r.job);
    const from = r.from.getTime();
    const to = r.to.getTime();
    if (!(from <= to)) throw new InvalidArgumentError('backfill: "from" must not be after "to"');
    if (to > this.o.clock.now())
      throw new InvalidArgumentError('backfill: "to" is in the future; the schedule itself fires what is to come');
    const slots = job.schedule.between(from - 1, to, MAX_BACKFILL_SLOTS + 1);
    if (slots.length > MAX_BACKFILL_SLOTS)
      throw new InvalidArgumentError(
        `backfill: the range holds more than ${MAX_BACKFILL_SLOTS} slots of "${r.job}"; split it into smaller ranges`,
      );
    return slots;
  }

  /** One step of a backfill (see the file comment). Leader only. */
  async step(r: BackfillRequest): Promise<BackfillStep> {
    const lease = this.o.leadership.lease();
    if (!lease) throw new NotLeaderError('only the leader can backfill');
    const all = this.slots(r);
    const limit = clamp(r.limit ?? BACKFILL_LIMIT, 1, MAX_BACKFILL_LIMIT);
    const rate = clamp(r.ratePerSec ?? BACKFILL_RATE, 1, MAX_BACKFILL_RATE);
    const mine = all.slice(0, limit);
    const step: BackfillStep = { job: r.job, total: all.length, processed: 0, inserted: 0, existing: 0, next: null };
    const started = this.o.clock.monotonic();
    for (let i = 0; i < mine.length; i += CHUNK) {
      const fires: FireRequest[] = mine
        .slice(i, i + CHUNK)
        .map((t) => ({ job: r.job, scheduledAt: new Date(t), trigger: 'backfill' }));
      const { inserted } = await this.commit(fires, lease.token);
      step.processed += fires.length;
      step.inserted += inserted;
      step.existing += fires.length - inserted;
      // Bounded rate: the next chunk waits until the slots so far fit the rate.
      const due = started + (step.processed / rate) * 1000 - this.o.clock.monotonic();
      if (due > 0 && i + CHUNK < mine.length) await this.o.clock.sleep(due);
    }
    const last = mine.at(-1);
    step.next = mine.length < all.length && last !== undefined ? new Date(last + 1) : null;
    return step;
  }

  private async commit(fires: FireRequest[], token: bigint): Promise<{ inserted: number }> {
    let result;
    try {
      result = await this.o.ledger.commitFires(fires, {
        fenceResource: this.o.fenceResource,
        token,
        replicaId: this.o.replicaId,
        stillLeading: () => this.o.leadership.lease()?.token === token,
      });
    } catch (err) {
      if (!(err instanceof StaleTokenError)) throw err;
      this.o.leadership.stepDown(`fence refused token ${token} during a backfill: ${err.message}`);
      throw new NotLeaderError('leadership ended during the backfill; run it again (it adds only what is missing)');
    }
    if (result.committed.length === 0 && this.o.leadership.lease()?.token !== token)
      throw new NotLeaderError('leadership ended during the backfill; run it again (it adds only what is missing)');
    const deliver = result.committed.filter((f) => f.state === 'pending');
    if (deliver.length > 0) {
      try {
        await this.o.delivery.enqueue(deliver);
        await this.o.ledger.markEnqueued(deliver.map((f) => f.runId));
      } catch (err) {
        this.o.logger.warn({ err, runs: deliver.length }, 'backfill: enqueue failed; the outbox will retry');
      }
    }
    return { inserted: result.committed.length };
  }
}

function clamp(n: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, Math.floor(n)));
}
