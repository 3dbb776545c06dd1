import type { Chore } from './chore.js';

/**
 * Workflow steps waiting for a signal past their timeout: each fails its workflow run, or goes on
 * as if the signal had come (its onTimeout), once a second on the leader. Unfenced on purpose: each
 * is one transaction on the workflow run's locked row that re-checks the wait, so a stale leader
 * repeating it does nothing.
 */
export class WaitTimeouts implements Chore {
  readonly name = "timing out workflow steps' waits";
  readonly intervalMs = 1000;

  constructor(private readonly timeOut: () => Promise<number>) {}

  round(): Promise<number> {
    return this.timeOut();
  }
}
