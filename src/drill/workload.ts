/**
 * The drill's workload, loaded by every replica process through `cronwarden start --jobs`.
 * CRONWARDEN_DRILL_JOBS jobs fire every second; each writes its effect to cw_drill_effects inside
 * ctx.transaction (effect and completion commit together), and every other job also takes the
 * run's fence in the same transaction.
 */
import { defineJob, type JobDefinition } from '../jobs/define-job.js';

const count = Number(process.env.CRONWARDEN_DRILL_JOBS ?? 10);
const replica = process.env.CRONWARDEN_REPLICA_ID ?? String(process.pid);

export const drillJobs: JobDefinition[] = Array.from({ length: count }, (_, i) =>
  defineJob({
    name: `drill-${i}`,
    schedule: '* * * * * *',
    handler: async (ctx) => {
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
