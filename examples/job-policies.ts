/**
 * Job policies (docs/guides/job-policies.md): a job's schedule, zone, DST rules, misfire and
 * overlap policies, checked when it is defined. Prints each job's next fires; needs no server.
 *
 *   npx tsx --tsconfig examples/tsconfig.json examples/job-policies.ts
 */
import { CronSchedule, InvalidConfigError, defineJob } from 'cronwarden';

export const nightlyInvoices = defineJob({
  name: 'nightly-invoices',
  schedule: '30 2 * * *', // 02:30 every day, Berlin time
  timezone: 'Europe/Berlin',
  dstGap: 'shift', // on the spring-forward day 02:30 does not exist: fire at 03:00 (the default)
  misfire: 'all', // after a failover, fire every missed slot inside the catch-up window (the default)
  catchUpWindowMs: 10 * 60_000,
  overlap: 'skip', // no second run while one is still running
  retries: 3,
  backoff: { type: 'exponential', delayMs: 1000 },
  timeoutMs: 60_000,
  handler: async (ctx) => {
    ctx.logger.info({ period: ctx.scheduledAt.toISOString() }, 'invoices');
  },
});

export const syncPrices = defineJob({
  name: 'sync-prices',
  schedule: '* * * * *',
  catchUpWindowMs: 24 * 3600_000, // a day-long outage is inside the window…
  maxCatchUp: 5, // …but only its 5 newest minutes fire; the older ones are reported missed
  overlap: 'queue',
  overlapQueueMax: 3, // three runs may wait behind the running one; a fourth slot is skipped
  handler: async (ctx) => {
    if (ctx.isCatchUp) ctx.logger.info({ lateByMs: ctx.lateByMs }, 'catching up');
  },
});

// Every option is checked at definition: a mistake stops start-up with the job and field named.
try {
  defineJob({ name: 'report', schedule: '0 7 * * *', timezone: 'Mars/Base', handler: () => undefined });
} catch (err) {
  if (!(err instanceof InvalidConfigError)) throw err;
  console.log(`refused: ${err.message}`);
}

// The DST rules in action: the next fires across Berlin's spring-forward change (2027-03-28).
const schedule = CronSchedule.parse('30 2 * * *', 'Europe/Berlin', { gap: 'shift' });
let at = Date.parse('2027-03-26T12:00:00Z');
for (let i = 0; i < 3; i++) {
  at = schedule.nextAfter(at)!;
  console.log(`${nightlyInvoices.name} fires at ${new Date(at).toISOString()}`);
}
