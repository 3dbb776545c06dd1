import type { Logger } from 'pino';
import { NotLeaderError, StaleTokenError } from '../../errors.js';
import type { FireLedger } from '../../ledger/fire-ledger.js';
import type { RetriedRun } from '../../ledger/run-retry.js';
import type { Leadership } from './fire-loop.js';
import type { RunDelivery } from './run-delivery.js';

export interface RunRetrierOptions {
  ledger: Pick<FireLedger, 'retryRun'>;
  delivery: Pick<RunDelivery, 'redeliver'>;
  leadership: Leadership;
  logger: Logger;
  replicaId: string;
  /** The scheduler's fence resource, the one fires advance. */
  fenceResource: string;
}

/**
 * The admin "retry a failed run", on the leader: the ledger puts the run back to pending under the
 * leader's fence (ledger/run-retry.ts), then the run is handed to the queue again under its own job
 * id (the old, failed queue entry is replaced). Fenced like a fire: a replica whose token a newer
 * leader has passed is refused by the fence, changes nothing, and steps down as the fire loop would.
 */
export class RunRetrier {
  constructor(private readonly o: RunRetrierOptions) {}

  async retry(runId: bigint): Promise<RetriedRun> {
    const lease = this.o.leadership.lease();
    if (!lease) throw new NotLeaderError('only the leader can retry a run');
    let retried: RetriedRun | undefined;
    try {
      retried = await this.o.ledger.retryRun(runId, {
        fenceResource: this.o.fenceResource,
        token: lease.token,
        replicaId: this.o.replicaId,
        stillLeading: () => this.o.leadership.lease() !== undefined,
      });
    } catch (err) {
      if (err instanceof StaleTokenError) {
        this.o.leadership.stepDown(`fence refused token ${lease.token} on a retry: ${err.message}`);
      }
      throw err;
    }
    if (!retried) throw new NotLeaderError('the lease ran out before the retry committed; nothing changed');
    // Committed. If this hand-over fails (Redis down, a crash) the run is pending and marked handed
    // over, so the leader's re-delivery sweep looks at it: a queue without it gets it again; one
    // still holding the old failed entry has it settled failed again with that reason (never stranded).
    await this.o.delivery.redeliver([retried]).catch((err: Error) => {
      this.o.logger.warn(
        { err, runId: runId.toString() },
        'retried run not handed to the queue yet; the re-delivery sweep will',
      );
    });
    this.o.logger.info(
      { runId: runId.toString(), job: retried.job, token: lease.token.toString(), from: retried.previousState },
      'run retried',
    );
    return retried;
  }
}
