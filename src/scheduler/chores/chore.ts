import type { Logger } from 'pino';
import type { Clock } from '../../clock.js';

/**
 * One of the leader's periodic chores (re-delivery sweep, pause expiry, removed jobs, retention):
 * a round of work, repeated every interval for the length of a tenure by a ChoreRunner.
 */
export interface Chore {
  /** Names the chore in the line logged when a round fails. */
  readonly name: string;
  readonly intervalMs: number;
  /** The first round at the start of the tenure; otherwise one interval after it. */
  readonly atStart?: boolean;
  /** One round. A rejection is logged and the chore tries again next round. */
  round(signal: AbortSignal): Promise<unknown>;
}

/**
 * Runs a list of chores for as long as a tenure lasts, as River's QueueMaintainerLeader starts and
 * stops its maintenance services on a leadership change: run(signal) at the start of the tenure,
 * the tenure's end aborts `signal`, and every chore stops after its current round.
 */
export class ChoreRunner {
  constructor(
    private readonly chores: readonly Chore[],
    private readonly o: { clock: Clock; logger: Logger },
  ) {}

  /** Every chore, each on its own interval, until `signal` aborts. Never rejects. */
  async run(signal: AbortSignal): Promise<void> {
    await Promise.all(this.chores.map((chore) => this.repeat(chore, signal)));
  }

  private async repeat(chore: Chore, signal: AbortSignal): Promise<void> {
    if (!chore.atStart) await this.pause(chore, signal);
    while (!signal.aborted) {
      try {
        await chore.round(signal);
      } catch (err) {
        this.o.logger.warn({ err }, `${chore.name} failed; trying again next round`);
      }
      await this.pause(chore, signal);
    }
  }

  private pause(chore: Chore, signal: AbortSignal): Promise<void> {
    return this.o.clock.sleep(chore.intervalMs, signal).catch(() => undefined);
  }
}
