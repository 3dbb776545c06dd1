import type { Logger } from 'pino';
import type { Tables } from '../../db/tables.js';
import type { FireLedger } from '../../ledger/fire-ledger.js';
import type { WorkflowLedger } from '../../ledger/workflow-ledger.js';
import { jobsOfLiveMembers } from '../../ledger/members.js';
import type { Queryable } from '../../ledger/transaction.js';
import type { Chore } from './chore.js';

export interface RemovedJobsOptions {
  ledger: Pick<FireLedger, 'cancelRunsOfUndefinedJobs' | 'forgetUndefinedJobs'>;
  workflows: Pick<WorkflowLedger, 'failUndefined'>;
  /** Tell the workers running these runs to stop (their commits are refused in any case). */
  cancel: (runIds: bigint[]) => Promise<void>;
  /** Where the members' job sets are read. */
  db: Queryable;
  tables: Tables;
  logger: Logger;
  /** How often the leader looks. Default 30 s. */
  intervalMs?: number;
  /** A member seen within this long counts as live. Default 60 s. */
  liveWithinMs?: number;
}

/**
 * A job removed from the code leaves runs behind (pending, or handed back by replicas that no
 * longer define it). Once no live replica defines the job, the leader settles them `cancelled`
 * with the reason, instead of letting them wait or fail as an error, and forgets the job's state
 * row (last fire, pause flag). During a rolling deploy the
 * old replicas still define it, so nothing is settled until the last of them is gone.
 * Unfenced on purpose: the statement is conditional on the run being active, so a stale leader
 * repeating it does no harm.
 */
export class RemovedJobs implements Chore {
  readonly name = "settling removed jobs' runs";
  readonly intervalMs: number;

  constructor(private readonly o: RemovedJobsOptions) {
    this.intervalMs = o.intervalMs ?? 30_000;
  }

  round(): Promise<{ runId: bigint; job: string }[]> {
    return this.settleOnce();
  }

  /** One round; returns the runs settled. */
  async settleOnce(): Promise<{ runId: bigint; job: string }[]> {
    const liveWithinMs = this.o.liveWithinMs ?? 60_000;
    const defined = await jobsOfLiveMembers(this.o.db, this.o.tables, liveWithinMs);
    if (defined === null) return []; // no member, or one too old to say which jobs it defines
    const reason = 'job removed: no live replica defines it';
    const settled = await this.o.ledger.cancelRunsOfUndefinedJobs([...defined], reason, liveWithinMs);
    for (const job of new Set(settled.map((r) => r.job))) {
      const runs = settled.filter((r) => r.job === job).map((r) => r.runId.toString());
      this.o.logger.warn({ job, runs }, `settled the runs of a removed job: ${reason}`);
    }
    // A workflow run started with a definition no live replica has fails; its steps are cancelled.
    for (const w of await this.o.workflows.failUndefined([...defined], liveWithinMs)) {
      this.o.logger.warn(
        { runId: w.runId.toString(), definition: w.definition },
        'failed a workflow run whose definition no live replica has',
      );
      await this.o.cancel(w.steps).catch(() => undefined);
    }
    // Its last fire and pause flag go too; its runs' history stays until retention.
    const forgotten = await this.o.ledger.forgetUndefinedJobs([...defined]);
    if (forgotten.length > 0) this.o.logger.info({ jobs: forgotten }, 'forgot the state of removed jobs');
    return settled;
  }
}
