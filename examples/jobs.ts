/**
 * Example jobs for the demo: each writes its effect in ctx.transaction, so a kill at any moment
 * leaves exactly one effect per scheduled time.
 */
import { defineJob } from '../src/jobs/define-job.js';

export const heartbeat = defineJob({
  name: 'heartbeat',
  schedule: '* * * * * *',
  handler: async (ctx) => {
    await ctx.transaction(async (tx) => {
      await tx.query('INSERT INTO demo_effects (job, scheduled_at, token) VALUES ($1, $2, $3)', [
        ctx.jobName,
        ctx.scheduledAt,
        ctx.fencingToken.toString(),
      ]);
    });
  },
});

export const everyFiveSeconds = defineJob({
  name: 'report',
  schedule: '*/5 * * * * *',
  timezone: 'Europe/Berlin',
  overlap: 'skip',
  handler: async (ctx) => {
    await ctx.transaction(async (tx) => {
      await tx.query('INSERT INTO demo_effects (job, scheduled_at, token) VALUES ($1, $2, $3)', [
        ctx.jobName,
        ctx.scheduledAt,
        ctx.fencingToken.toString(),
      ]);
    });
    ctx.logger.info({ at: ctx.scheduledAt.toISOString() }, 'report written');
  },
});
