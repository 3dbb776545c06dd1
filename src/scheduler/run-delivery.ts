/** How committed runs reach workers. The BullMQ implementation is bullmq-delivery.ts. */
export interface DeliverableRun {
  runId: bigint;
  job: string;
  scheduledAt: Date;
}

export interface RunDelivery {
  /** Hand runs to the queue. Idempotent per run: enqueueing a run twice delivers it once. */
  enqueue(runs: DeliverableRun[]): Promise<void>;
  /** Ask whichever worker runs these to abort them (overlap 'replace'). */
  cancel(runIds: bigint[]): Promise<void>;
}
