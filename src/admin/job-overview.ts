import type { JobStats } from '../ledger/job-stats.js';
import { describeSchedule } from '../cron/describe-schedule.js';
import type { ScheduledJob } from '../cron/scheduled-job.js';
import { zoned, type ZonedInstant } from './zoned-time.js';

/** How many upcoming fires the overview lists. */
const NEXT_FIRES = 3;

/** A job's overview fields beyond /api/jobs' basics: its schedule in words, next fires, 24 h numbers. */
export function jobOverview(
  job: ScheduledJob,
  now: number,
  stats: JobStats | undefined,
): { description: string; nextFires: ZonedInstant[]; stats: JobStats | null } {
  const nextFires: ZonedInstant[] = [];
  let at = now;
  while (nextFires.length < NEXT_FIRES) {
    const next = job.schedule.nextAfter(at);
    if (next === null) break;
    nextFires.push(zoned(next, job.schedule.timezone));
    at = next;
  }
  return { description: describeSchedule(job.schedule.expression), nextFires, stats: stats ?? null };
}
