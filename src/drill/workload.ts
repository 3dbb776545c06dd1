/**
 * The drill's workload, loaded by every replica process through `cronwarden start --jobs`.
 * CRONWARDEN_DRILL_JOBS jobs fire every second; each writes its effect to cw_drill_effects inside
 * ctx.transaction (effect and completion commit together), and every other job also takes the
 * run's fence in the same transaction. One job in four works for 1.5 s before it writes, ignoring
 * its signal as real handlers often do: a replica frozen past the BullMQ lock (the drill sets it
 * shorter than a SIGSTOP) wakes up mid-handler after its run was re-delivered, and its write must
 * be refused.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { defineJob, type JobDefinition } from '../jobs/define-job.js';

const count = Number(process.env.CRONWARDEN_DRILL_JOBS ?? 10);
const replica = process.env.CRONWARDEN_REPLICA_ID ?? String(process.pid);
export const SLOW_JOB_WORK_MS = 1500;

export const drillJobs: JobDefinition[] = Array.from({ length: count }, (_, i) =>
  defineJob({
    name: `drill-${i}`,
    schedule: '* * * * * *',
    handler: async (ctx) => {
      if (i % 4 === 1) await sleep(SLOW_JOB_WORK_MS);
      await ctx.transaction(async (tx) => {
        // A fence per run (its idempotency key): attempts of one run are what fencing orders.
        // Different runs' tokens are not ordered by schedule, so one resource for all runs of a
        // job would refuse an on-time run after a late re-delivery of an earlier one.
        if (i % 2 === 0) await ctx.fence(`drill/${ctx.idempotencyKey}`, tx);
        await tx.query('INSERT INTO cw_drill_effects (run_id, job, scheduled_at, token, replica) VALUES ($1, $2, $3, $4, $5)', [
          ctx.runId,
          ctx.jobName,
          ctx.scheduledAt,
          ctx.fencingToken.toString(),
          replica,
        ]);
      });
    },
  }),
);
