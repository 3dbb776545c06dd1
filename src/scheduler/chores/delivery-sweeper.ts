import type { Logger } from 'pino';
import type { FireLedger, HandedOverRun } from '../../ledger/fire-ledger.js';
import type { QueuedState, RunDelivery } from '../firing/run-delivery.js';
import type { Chore } from './chore.js';

export interface DeliverySweeperOptions {
  ledger: Pick<FireLedger, 'deliveriesToCheck' | 'failUnrecorded'>;
  delivery: Pick<RunDelivery, 'inspect' | 'redeliver'>;
  logger: Logger;
  /** A handed-over run still active after this long is looked up in the queue. Default 30 s. */
  checkAfterMs?: number;
  /** How often the leader sweeps. Default 5 s. */
  intervalMs?: number;
  /** Runs looked up per sweep. Default 200. */
  batchSize?: number;
}

export interface SweepResult {
  checked: number;
  /** Lost by the queue and handed over again under the same job id. */
  redelivered: number;
  /** Failed by the queue without an outcome in the ledger: settled failed with the reason. */
  settled: number;
}

/**
 * The ledger is the truth for delivery too. The outbox hands over runs the queue never got; this
 * sweep, on the leader, finds runs the queue got and then lost (Redis restarted without
 * persistence, failed over to a lagging replica, flushed, evicted) and hands them over again, and
 * settles runs the queue failed while their outcome never reached the ledger. A run is never run
 * twice for it: the ledger's claim, ctx.transaction and the fences refuse a second effect.
 * Unfenced on purpose: every write is conditional on the run's state and newest claim, and a
 * re-delivery under the same job id is idempotent, so a stale leader sweeping does no harm.
 */
export class DeliverySweeper implements Chore {
  readonly name = 're-delivery sweep';
  readonly intervalMs: number;

  constructor(private readonly o: DeliverySweeperOptions) {
    this.intervalMs = o.intervalMs ?? 5000;
  }

  round(): Promise<SweepResult> {
    return this.sweepOnce();
  }

  async sweepOnce(): Promise<SweepResult> {
    const runs = await this.o.ledger.deliveriesToCheck(this.o.checkAfterMs ?? 30_000, this.o.batchSize ?? 200);
    if (runs.length === 0) return { checked: 0, redelivered: 0, settled: 0 };
    const states = await this.o.delivery.inspect(runs);
    const lost = runs.filter((_, i) => needsRedelivery(states[i]));
    if (lost.length > 0) {
      await this.o.delivery.redeliver(lost);
      this.o.logger.warn(
        { runs: lost.map((r) => r.runId.toString()) },
        'the queue lost runs the ledger has active: handed them over again',
      );
    }
    let settled = 0;
    for (const [i, run] of runs.entries()) {
      const state = states[i];
      if (state?.kind === 'failed' && (await this.settleFailed(run, state.reason))) settled++;
    }
    return { checked: runs.length, redelivered: lost.length, settled };
  }

  private async settleFailed(run: HandedOverRun, queueReason: string): Promise<boolean> {
    const reason = `the queue failed this run but its outcome never reached the ledger: ${queueReason}`;
    const done = await this.o.ledger.failUnrecorded(run, reason);
    if (done)
      this.o.logger.warn({ runId: run.runId.toString(), job: run.job, reason }, 'settled a run the queue had failed');
    return done;
  }
}

/** Missing from the queue, or finished there while the ledger still has the run active. */
function needsRedelivery(state: QueuedState | undefined): boolean {
  return state?.kind === 'missing' || state?.kind === 'completed';
}
