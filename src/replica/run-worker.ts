import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { BullmqDelivery } from '../jobs/bullmq-delivery.js';
import { BullmqWorker } from '../jobs/bullmq-worker.js';
import type { JobRegistry } from '../jobs/job-registry.js';
import { AttemptMetrics } from '../jobs/attempt-metrics.js';
import { RunExecutor } from '../jobs/run-executor.js';
import { RunLedgerBatches } from '../jobs/run-ledger-batches.js';
import { WorkflowLedgerBatches } from '../jobs/workflow-ledger-batches.js';
import type { Ledger } from '../ledger/ledger.js';
import type { ResolvedReplicaOptions } from './replica-defaults.js';

export interface RunWorkerOptions {
  ledger: Ledger;
  registry: JobRegistry;
  delivery: BullmqDelivery;
  replicaId: string;
  namespace: string;
  redisUrl?: string;
  redis?: Redis;
  worker: ResolvedReplicaOptions['worker'];
  logger: Logger;
  /**
   * Count run attempts (only a replica that serves /metrics: a series per job and outcome, which
   * with many jobs is memory the others need not hold).
   */
  countAttempts: boolean;
}

/**
 * The replica's side that runs handlers, on every replica whether it leads or not: the executor
 * (claims, `ctx`, grouped completions, flow control, workflow hand-offs, all through the ledger)
 * behind the BullMQ worker that brings it deliveries and beats this worker's liveness.
 */
export class RunWorker {
  /** Its run attempts, counted as each ends (the admin server's /metrics shows them); see countAttempts. */
  readonly metrics: AttemptMetrics | undefined;
  private readonly executor: RunExecutor;
  private worker: BullmqWorker | undefined;

  constructor(private readonly o: RunWorkerOptions) {
    const { ledger, registry, delivery } = o;
    this.metrics = o.countAttempts ? new AttemptMetrics({ replica: o.replicaId, namespace: o.namespace }) : undefined;
    this.executor = new RunExecutor({
      metrics: this.metrics,
      ledger: new RunLedgerBatches(ledger.runs),
      registry,
      replicaId: o.replicaId,
      logger: o.logger,
      redeliver: (run, delayMs) => delivery.redeliverAfter(run, delayMs),
      limits: ledger.runs,
      workflows: new WorkflowLedgerBatches(ledger.workflows),
      deliverSteps: (runs) => delivery.handOver(runs, (ids) => ledger.fires.markEnqueued(ids)),
    });
  }

  /** Start taking deliveries (not at all when the replica's worker is disabled). */
  async start(): Promise<void> {
    if (!this.o.worker.enabled) return;
    const { redisUrl, redis, namespace, worker, logger, ledger } = this.o;
    this.worker = new BullmqWorker({
      redisUrl,
      redis,
      namespace,
      ...worker,
      executor: this.executor,
      logger,
      liveness: ledger.runs,
    });
    this.executor.setPublisher(this.worker.publisherFor());
    await this.worker.start();
  }

  /** Let running handlers finish within `graceMs`, then hand the rest back (see BullmqWorker.close). */
  async close(graceMs: number): Promise<void> {
    await this.worker?.close(graceMs);
  }
}
