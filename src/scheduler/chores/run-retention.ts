import type { Logger } from 'pino';
import type { FireLedger } from '../../ledger/fire-ledger.js';
import type { Chore } from './chore.js';

export interface RunRetentionOptions {
  ledger: Pick<FireLedger, 'pruneFinishedRuns'>;
  logger: Logger;
  /** Finished runs older than this are deleted. */
  retentionMs: number;
  /** How often the leader prunes. Default 10 minutes. */
  intervalMs?: number;
  /** Rows per DELETE, so no statement holds locks for long. Default 5,000. */
  batchSize?: number;
}

/** At most this many batches per round: a large backlog is worked off over several rounds. */
const MAX_BATCHES_PER_ROUND = 100;

/**
 * Keeps the ledger from growing without bound (a job due every second adds 86,400 runs a day).
 * Runs on the leader only, for the length of its tenure: right away, then every interval, it
 * deletes finished runs older than the retention period in small batches.
 */
export class RunRetention implements Chore {
  readonly name = 'retention';
  readonly intervalMs: number;
  /** Right away: a leader that has just won prunes before its first interval. */
  readonly atStart = true;

  constructor(private readonly o: RunRetentionOptions) {
    this.intervalMs = o.intervalMs ?? 10 * 60_000;
  }

  round(signal: AbortSignal): Promise<number> {
    return this.pruneOnce(signal);
  }

  /** One round: batches until one comes back short. Returns the number of runs deleted. */
  async pruneOnce(signal?: AbortSignal): Promise<number> {
    const batch = this.o.batchSize ?? 5000;
    let deleted = 0;
    try {
      for (let i = 0; i < MAX_BATCHES_PER_ROUND && !signal?.aborted; i++) {
        const n = await this.o.ledger.pruneFinishedRuns(this.o.retentionMs, batch);
        deleted += n;
        if (n < batch) break;
      }
    } catch (err) {
      this.o.logger.warn({ err, deleted }, 'retention: could not delete old runs; trying again next round');
    }
    if (deleted > 0)
      this.o.logger.info(
        { deleted, retentionMs: this.o.retentionMs },
        'retention: deleted finished runs past the retention period',
      );
    return deleted;
  }
}
