/**
 * How long each job's ctx.transaction callbacks take, and whether they gain from a group commit.
 *
 * A group's callbacks run one after another on one connection (src/ledger/run-transactions.ts), so
 * a group shares a COMMIT (a few ms) at the price of each callback waiting for the ones before it.
 * That pays for quick callbacks (one INSERT: well under a ms) and costs for slow ones. So a
 * callback that took longer than SLOW_CALLBACK_MS ends its group (the runs after it are redone
 * alone, side by side on the pool's connections), and a job whose callbacks take that long on
 * average commits each alone from the call. Measured (test/integration/slow-callbacks.test.ts, ten
 * runs at concurrency 10 whose callbacks work 300 ms; load 2.6): one group ran them one at a time,
 * 3,064 ms for the ten; now 725 ms the first time (the group ends after its first callback, the
 * nine others side by side), 349 ms once the job is known slow.
 */

/** A ctx.transaction callback slower than this gains nothing from a shared COMMIT. */
export const SLOW_CALLBACK_MS = 20;

/** Weight of the newest callback's time in a job's running mean: about the last 5. */
const WEIGHT = 0.2;

export class CallbackTimes {
  private readonly means = new Map<string, number>();

  /** A callback of `job` took `ms`. */
  observe(job: string, ms: number): void {
    const t = Math.max(0, ms);
    const mean = this.means.get(job);
    this.means.set(job, mean === undefined ? t : mean + (t - mean) * WEIGHT);
  }

  /** Whether `job`'s callbacks go into group commits: unless known to be slow. */
  groups(job: string): boolean {
    return (this.means.get(job) ?? 0) <= SLOW_CALLBACK_MS;
  }
}
