/**
 * How long a run waits before its next attempt. A failed handler waits its job's backoff (as
 * BullMQ computes it: fixed, or the delay doubled for each failure after the first); a run handed
 * back for a reason that is not its handler's (no replica defines its job yet, the ledger is
 * unreachable) waits 0.5 s, doubling to 30 s, and uses up none of the job's retries.
 */
import type { BackoffOptions } from './define-job.js';

/** The wait before the attempt after the `failures`-th failure (1 for the first). */
export function retryDelayMs(backoff: Readonly<BackoffOptions>, failures: number): number {
  if (backoff.type === 'fixed') return backoff.delayMs;
  return Math.round(backoff.delayMs * 2 ** Math.max(0, failures - 1));
}

/** The wait before delivering again after `handBacks` hand-backs that were not failures (0 for the first). */
export function handBackDelayMs(handBacks: number): number {
  return Math.min(30_000, 500 * 2 ** Math.min(Math.max(0, handBacks), 6));
}
