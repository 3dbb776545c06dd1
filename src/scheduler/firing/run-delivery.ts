/** How committed runs reach workers. The BullMQ implementation is bullmq-delivery.ts. */
export interface DeliverableRun {
  runId: bigint;
  job: string;
  scheduledAt: Date;
  /** The trace context of the fire that committed it (W3C traceparent), when traced. */
  traceparent?: string;
  /** Not claimable before this (a workflow step's delay): delivered then. Absent or null: now. */
  availableAt?: Date | null;
}

export interface RunDelivery {
  /** Hand runs to the queue. Idempotent per run: enqueueing a run twice delivers it once. */
  enqueue(runs: DeliverableRun[]): Promise<void>;
  /** Ask whichever worker runs these to abort them (overlap 'replace'). */
  cancel(runIds: bigint[]): Promise<void>;
  /**
   * Where the queue has each run's own delivery, the one `redeliver` makes (same order as `runs`);
   * a run handed over in a batch is not found there ('missing').
   */
  inspect(runs: DeliverableRun[]): Promise<QueuedState[]>;
  /** Hand runs to the queue again, one per delivery under the run's own id, replacing a finished one. */
  redeliver(runs: DeliverableRun[]): Promise<void>;
}

/**
 * A run as the queue has it: still to be worked on ('queued': waiting, delayed or active), lost
 * ('missing': a restart without persistence, a flush, an eviction), or finished by the queue.
 */
export type QueuedState =
  { kind: 'queued' } | { kind: 'missing' } | { kind: 'completed' } | { kind: 'failed'; reason: string };
