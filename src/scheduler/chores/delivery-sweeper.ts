import type { Logger } from 'pino';
import type { FireLedger } from '../../ledger/fire-ledger.js';
import type { RunDelivery } from '../firing/run-delivery.js';
import type { Chore } from './chore.js';

export interface DeliverySweeperOptions {
  ledger: Pick<FireLedger, 'deliveriesToCheck'>;
  delivery: Pick<RunDelivery, 'inspect' | 'redeliver'>;
  logger: Logger;
  /** A handed-over run still waiting for a worker after this long is looked up in the queue. Default 30 s. */
  checkAfterMs?: number;
  /** How often the leader sweeps. Default 5 s. */
  intervalMs?: number;
  /** Runs looked up per sweep. Default 200. */
  batchSize?: number;
}

/** The sweep's defaults: a run is looked up after 30 s, 200 every 5 s (the ledger check's bound counts on them). */
export const SWEEP_DEFAULTS = { checkAfterMs: 30_000, intervalMs: 5000, batchSize: 200 } as const;

export interface SweepResult {
  checked: number;
  /** Not in the queue (lost, or its delivery ended without a claim): handed over again. */
  redelivered: number;
}

/**
 * The ledger is the truth for delivery too. The outbox hands over runs the queue never got; this
 * sweep, on the leader, finds runs the queue got and then lost (Redis restarted without
 * persistence, failed over to a lagging replica, flushed, evicted) and hands them over again, one
 * run per delivery under the run's own job id, so a second sweep finds it queued. A run is never
 * run twice for it: the ledger's claim, ctx.transaction and the fences refuse a second effect.
 * Running runs are not its business: a live worker holds them, and a dead one's are taken over by
 * the others once it stops beating. Unfenced on purpose: a re-delivery is idempotent, so a stale
 * leader sweeping does no harm.
 */
export class DeliverySweeper implements Chore {
  readonly name = 're-delivery sweep';
  readonly intervalMs: number;

  constructor(private readonly o: DeliverySweeperOptions) {
    this.intervalMs = o.intervalMs ?? SWEEP_DEFAULTS.intervalMs;
  }

  round(): Promise<SweepResult> {
    return this.sweepOnce();
  }

  async sweepOnce(): Promise<SweepResult> {
    const runs = await this.o.ledger.deliveriesToCheck(
      this.o.checkAfterMs ?? SWEEP_DEFAULTS.checkAfterMs,
      this.o.batchSize ?? SWEEP_DEFAULTS.batchSize,
    );
    if (runs.length === 0) return { checked: 0, redelivered: 0 };
    const states = await this.o.delivery.inspect(runs);
    const lost = runs.filter((_, i) => states[i]?.kind !== 'queued');
    if (lost.length > 0) {
      await this.o.delivery.redeliver(lost);
      this.o.logger.warn(
        { runs: lost.map((r) => r.runId.toString()) },
        'runs waiting for a worker are not in the queue: handed them over again',
      );
    }
    return { checked: runs.length, redelivered: lost.length };
  }
}
