import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import type { BullmqDelivery } from '../jobs/bullmq-delivery.js';
import type { Ledger } from '../ledger/ledger.js';
import type { JobPause } from '../ledger/pauses.js';
import type { Chore } from '../scheduler/chores/chore.js';
import { DeliverySweeper } from '../scheduler/chores/delivery-sweeper.js';
import { LedgerCheckChore } from '../scheduler/chores/ledger-check.js';
import { ledgerChecks } from '../scheduler/chores/ledger-checks.js';
import { saveLedgerCheck } from '../ledger/ledger-check.js';
import { PauseExpiry } from '../scheduler/chores/pause-expiry.js';
import { RemovedJobs } from '../scheduler/chores/removed-jobs.js';
import { RunRetention } from '../scheduler/chores/run-retention.js';
import { WaitTimeouts } from '../scheduler/chores/wait-timeouts.js';
import type { Leadership } from '../scheduler/firing/fire-loop.js';
import type { ReplicaOptions } from './replica-options.js';
import type { ResolvedReplicaOptions } from './replica-defaults.js';

export interface LeaderChoresOptions
  extends Pick<ReplicaOptions, 'redelivery' | 'removedJobs'>, Pick<ResolvedReplicaOptions, 'ledgerCheck' | 'shards'> {
  /** 0 keeps every run. */
  retentionMs: number;
  ledger: Ledger;
  delivery: BullmqDelivery;
  /** Shard 0's leadership: the chores for the whole deployment run under its lease and fence. */
  leadership: Leadership;
  fenceResource: string;
  clock: Clock;
  logger: Logger;
  onPauseExpired: (pause: JobPause) => void;
  /** Workflow steps' waits past their timeout (WorkflowOps.timeOutWaits). */
  timeOutWaits: () => Promise<number>;
  /** BullMQ's lock on a delivery (worker.lockDurationMs): a dead worker's unclaimed delivery waits this long. */
  workerLockMs: number;
  /** The jobs with a timeout, for the ledger check's bound on running runs. */
  timeouts: () => readonly { job: string; timeoutMs: number }[];
}

/**
 * The leader's chores: retention (unless 0), the re-delivery sweep, pause expiry, removed jobs'
 * runs, steps' waits past their timeout, and the live ledger check (unless its interval is 0).
 */
export function leaderChores(o: LeaderChoresOptions): Chore[] {
  const { ledger, delivery, clock, logger } = o;
  const chores: Chore[] = [];
  if (o.retentionMs > 0) chores.push(new RunRetention({ ledger: ledger.fires, logger, retentionMs: o.retentionMs }));
  chores.push(
    new DeliverySweeper({ ledger: ledger.fires, delivery, logger, ...o.redelivery }),
    new PauseExpiry({
      ledger: ledger.fires,
      leadership: o.leadership,
      clock,
      logger,
      fenceResource: o.fenceResource,
      onResumed: o.onPauseExpired,
    }),
    new RemovedJobs({
      ledger: ledger.fires,
      workflows: ledger.workflows,
      cancel: (ids) => delivery.cancel(ids),
      db: ledger.pool,
      tables: ledger.tables,
      logger,
      ...o.removedJobs,
    }),
    new WaitTimeouts(o.timeOutWaits),
  );
  if (o.ledgerCheck.intervalMs > 0) chores.push(ledgerCheckChore(o));
  return chores;
}

/**
 * The live ledger check over the whole ledger (every shard's jobs: it runs under shard 0's tenure).
 */
function ledgerCheckChore(o: LeaderChoresOptions): LedgerCheckChore {
  const { ledger } = o;
  return new LedgerCheckChore({
    checks: ledgerChecks({
      ...o,
      ...o.ledgerCheck,
      claimerLiveWithinMs: () => ledger.runs.claimerLiveWithinMs,
      now: () => o.clock.now(),
    }),
    save: (report) => saveLedgerCheck(ledger.pool, ledger.tables, report),
    clock: o.clock,
    logger: o.logger,
    intervalMs: o.ledgerCheck.intervalMs,
  });
}
