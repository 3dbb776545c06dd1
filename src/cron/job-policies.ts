/**
 * The policies a job chooses, as the fire loop applies them: catch-up bounded in time (the
 * window) and count (maxCatchUp), pause with a reason and an expiry, and the bounded overlap queue.
 * Pure functions, so each rule is tested on its own (test/unit/job-policies.test.ts).
 */
import type { FireTrigger } from './fire-trigger.js';
import { missedRanges, type MissedRange } from './missed-ranges.js';
import { planCatchUp, type CatchUpInput, type CatchUpPlan } from './misfire.js';
import type { ScheduledJob } from './scheduled-job.js';

/** What to fire for `job`'s instants in (lastFiredMs, nowMs], under its misfire policy, window and maxCatchUp. */
export function planJobCatchUp(job: ScheduledJob, lastFiredMs: number | null, nowMs: number): CatchUpPlan {
  return planCatchUp(catchUpInput(job, lastFiredMs, nowMs));
}

/** The missed instants of `plan` (planJobCatchUp's, with the same arguments) as ranges by reason. */
export function jobMissedRanges(
  job: ScheduledJob,
  lastFiredMs: number | null,
  nowMs: number,
  plan: CatchUpPlan,
): MissedRange[] {
  return missedRanges(catchUpInput(job, lastFiredMs, nowMs), plan);
}

function catchUpInput(job: ScheduledJob, lastFiredMs: number | null, nowMs: number): CatchUpInput {
  return {
    schedule: job.schedule,
    policy: job.misfire,
    lastFiredMs,
    nowMs,
    catchUpWindowMs: job.catchUpWindowMs,
    misfireGraceMs: job.misfireGraceMs,
    maxCatchUp: job.maxCatchUp,
  };
}

/**
 * 'catchup' for an instant fired later than the job's misfire grace (the handler sees
 * ctx.isCatchUp), else `onTime`. After an election every fire of the reconciliation is 'catchup'.
 */
export function fireTrigger(job: ScheduledJob, atMs: number, nowMs: number, onTime: FireTrigger): FireTrigger {
  return nowMs - atMs > job.misfireGraceMs ? 'catchup' : onTime;
}

/** The reason a skipped fire records for a pause: who, why and until when. */
export function pauseReason(pause: { reason: string | null; by: string | null; until: Date | null }): string {
  const parts = ['job is paused'];
  if (pause.by) parts.push(`by ${pause.by}`);
  if (pause.until) parts.push(`until ${pause.until.toISOString()}`);
  return pause.reason ? `${parts.join(' ')}: ${pause.reason}` : parts.join(' ');
}

/** The reason a fire is skipped by overlap 'coalesce' (the commit names the waiting run that stands for it). */
export const COALESCED = 'overlap "coalesce": the waiting run stands for it';

/** The reason a fire is skipped when overlap 'queue' already has `max` runs waiting. */
export function queueFullReason(max: number): string {
  return `overlap "queue": ${max} run${max === 1 ? '' : 's'} already waiting (overlapQueueMax ${max})`;
}
