import type { Logger } from 'pino';
import type { Clock } from '../../clock.js';
import { StaleTokenError } from '../../errors.js';
import type { FireLedger } from '../../ledger/fire-ledger.js';
import type { JobPause } from '../../ledger/pauses.js';
import type { Leadership } from '../firing/fire-loop.js';
import type { Chore } from './chore.js';

export interface PauseExpiryOptions {
  ledger: Pick<FireLedger, 'expirePauses'>;
  leadership: Leadership;
  clock: Clock;
  logger: Logger;
  /** Fence resource of the scheduler (the fire loop's). */
  fenceResource: string;
  /** How often the leader looks for expired pauses. Default 1 s. */
  intervalMs?: number;
  /** Told of each pause lifted here (exactly once across replicas: the ledger's update decides). */
  onResumed?: (pause: JobPause) => void;
}

/**
 * The leader lifts expired pauses, under its fence, so `status` stops showing them and the
 * resume is recorded once. Which slots fire does not wait for it: the fire loop already fires a
 * slot at or after `until` (see src/ledger/pauses.ts), so a failover before the lift loses nothing.
 */
export class PauseExpiry implements Chore {
  readonly name = 'lifting expired pauses';
  readonly intervalMs: number;

  constructor(private readonly o: PauseExpiryOptions) {
    this.intervalMs = o.intervalMs ?? 1000;
  }

  round(): Promise<JobPause[]> {
    return this.liftExpired();
  }

  /** Lift the pauses expired by now; returns them (none when not leading or the fence refused us). */
  async liftExpired(): Promise<JobPause[]> {
    const lease = this.o.leadership.lease();
    if (!lease) return [];
    let lifted: JobPause[];
    try {
      lifted = await this.o.ledger.expirePauses(this.o.clock.now(), {
        resource: this.o.fenceResource,
        token: lease.token,
      });
    } catch (err) {
      if (!(err instanceof StaleTokenError)) throw err;
      this.o.leadership.stepDown(`fence refused token ${lease.token} lifting expired pauses: ${err.message}`);
      return [];
    }
    for (const p of lifted) {
      this.o.logger.info(
        { job: p.job, until: p.until?.toISOString(), pausedBy: p.by, reason: p.reason },
        'pause expired: job resumed',
      );
      this.o.onResumed?.(p);
    }
    return lifted;
  }
}
