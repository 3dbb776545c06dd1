/**
 * The drill's workload, loaded by every replica process through `cronwarden start --jobs`.
 * CRONWARDEN_DRILL_JOBS jobs fire every second (named by job-names.ts); each writes its effect to cw_drill_effects inside
 * ctx.transaction (effect and completion commit together), and every other job also takes the
 * run's fence in the same transaction. One job in four works for 1.5 s before it writes, ignoring
 * its signal as real handlers often do: a replica frozen past the BullMQ lock (the drill sets it
 * shorter than a SIGSTOP) wakes up mid-handler after its run was re-delivered, and its write must
 * be refused.
 *
 * Every attempt also appends one row to cw_drill_attempt_log, the independent effect log: its own
 * autocommit statement on its own small pool, written AFTER ctx.transaction has returned or thrown,
 * so it survives the rollback of a refused attempt. cw_drill_effects can only show what committed;
 * the attempt log shows what each attempt tried and how it ended ('committed', 'refused' by the
 * fence or the claim check, 'skipped' because the run was already completed, or 'failed' for any
 * other error), which lets the checker see stale writes refused and catch a stale write that landed.
 * Every job's write is fenced (ctx.transaction refuses an attempt that no longer holds the run's
 * newest claim; half the jobs add ctx.fence on top), so every job logs its attempts.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { defineJob, type JobDefinition } from '../jobs/define-job.js';
import type { JobContext } from '../jobs/job-context.js';
import { ATTEMPT_LOG_TABLE, type AttemptOutcome } from './attempt-log.js';
import { drillJobNames } from './job-names.js';
import { drillWorkflows } from './workflow-workload.js';

const count = Number(process.env.CRONWARDEN_DRILL_JOBS ?? 10);
// The replica's own shard count (the drill sets it): with shards, job i is named into shard i mod N.
const names = drillJobNames(count, Number(process.env.CRONWARDEN_SHARDS ?? 1));
const replica = process.env.CRONWARDEN_REPLICA_ID ?? String(process.pid);
export const SLOW_JOB_WORK_MS = 1500;

/** Errors by which ctx.transaction / ctx.fence refuse a stale attempt (by name: the runtime may load its own copy of the classes). */
const REFUSALS = new Set(['StaleTokenError', 'AbortedError']);

let logPool: pg.Pool | undefined;
function attemptLog(): pg.Pool {
  // Small, separate from the runtime's pool, and never keeping the process alive on shutdown.
  if (!logPool) {
    // Beside the ledger, or on another server when the drill strikes the ledger itself.
    const url = process.env.CRONWARDEN_DRILL_ATTEMPT_LOG_URL ?? process.env.CRONWARDEN_DATABASE_URL;
    logPool = new pg.Pool({ connectionString: url, max: 2, idleTimeoutMillis: 5000, allowExitOnIdle: true });
    logPool.on('error', () => {}); // an idle client's broken connection is dropped, not fatal
  }
  return logPool;
}

async function logAttempt(ctx: JobContext, outcome: AttemptOutcome, error?: unknown): Promise<void> {
  try {
    await attemptLog().query(
      `INSERT INTO ${ATTEMPT_LOG_TABLE} (run_id, job, scheduled_at, token, outcome, replica, error) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
      [
        ctx.runId,
        ctx.jobName,
        ctx.scheduledAt,
        ctx.fencingToken.toString(),
        outcome,
        replica,
        error === undefined ? null : String((error as Error)?.message ?? error),
      ],
    );
  } catch (err) {
    // The log is evidence, not part of the job: a failed append must not change what the run does.
    ctx.logger.warn({ err }, 'drill attempt log: append failed');
  }
}

export const drillJobs: JobDefinition[] = names.map((name, i) =>
  defineJob({
    name,
    schedule: '* * * * * *',
    handler: async (ctx) => {
      if (i % 4 === 1) await sleep(SLOW_JOB_WORK_MS);
      let result: true | undefined;
      try {
        result = await ctx.transaction(async (tx) => {
          // A fence per run (its idempotency key): attempts of one run are what fencing orders.
          // Different runs' tokens are not ordered by schedule, so one resource for all runs of a
          // job would refuse an on-time run after a late re-delivery of an earlier one.
          if (i % 2 === 0) await ctx.fence(`drill/${ctx.idempotencyKey}`, tx);
          await tx.query(
            'INSERT INTO cw_drill_effects (run_id, job, scheduled_at, token, replica) VALUES ($1, $2, $3, $4, $5)',
            [ctx.runId, ctx.jobName, ctx.scheduledAt, ctx.fencingToken.toString(), replica],
          );
          return true as const;
        });
      } catch (err) {
        await logAttempt(ctx, REFUSALS.has((err as Error)?.name) ? 'refused' : 'failed', err);
        throw err;
      }
      // fn ran and committed → its value; the run was already completed → undefined (fn not called).
      await logAttempt(ctx, result === true ? 'committed' : 'skipped');
    },
  }),
);

/** With `cronwarden drill --workflows`: the workflows beside the jobs. */
export const workflows = process.env.CRONWARDEN_DRILL_WORKFLOWS === '1' ? drillWorkflows : [];
