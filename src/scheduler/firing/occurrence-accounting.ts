/**
 * What the fire loop records so that every due instant has an answer (docs/concepts/occurrences.md):
 * the schedule era each job is accounted under, opened when a tenure starts leading a job whose
 * schedule differs from its open era's, and a catch-up plan's missed instants as ranges.
 */
import { jobMissedRanges } from '../../cron/job-policies.js';
import { slotOwner } from '../../cron/job-names.js';
import type { CatchUpPlan } from '../../cron/misfire.js';
import { sameSchedule, scheduleIdentity } from '../../cron/schedule-era.js';
import type { ScheduledJob } from '../../cron/scheduled-job.js';
import type { MissedRangeRecord, OpenEra } from '../../ledger/fire-ledger.js';

/**
 * The job's era at a tenure's start: `open`, a new era to record when its schedule changed (or it
 * had none), starting at its last fire (the catch-up goes on from there under the new schedule) or
 * now; `planFrom`, where its catch-up starts: its last fire, else the start of an unchanged era (a
 * job that never fired was still due since its era began), else null (it starts from now).
 */
export function eraAtTenureStart(
  job: ScheduledJob,
  current: OpenEra | undefined,
  lastFiredMs: number | null,
  nowMs: number,
): { open: OpenEra | undefined; planFrom: number | null } {
  const open = changedEra(job, current, lastFiredMs ?? nowMs);
  if (!open && current) return { open, planFrom: lastFiredMs ?? Math.min(current.from.getTime(), nowMs) };
  return { open, planFrom: lastFiredMs };
}

/**
 * The era to open for `job` if its schedule differs from its open era's (or it has none), from
 * `fromMs` (never before the open era's own start); undefined when its schedule is unchanged.
 */
export function changedEra(job: ScheduledJob, current: OpenEra | undefined, fromMs: number): OpenEra | undefined {
  const identity = scheduleIdentity(job.schedule);
  if (current && sameSchedule(current, identity)) return undefined;
  const from = Math.max(fromMs, current?.from.getTime() ?? -Infinity);
  return { job: slotOwner(job.name), ...identity, from: new Date(from) };
}

/** The plan's missed instants as the ledger's range records, decided at `nowMs`. */
export function missedRecords(
  job: ScheduledJob,
  plan: CatchUpPlan,
  lastFiredMs: number | null,
  nowMs: number,
): MissedRangeRecord[] {
  if (plan.missedCount === 0) return [];
  return jobMissedRanges(job, lastFiredMs, nowMs, plan).map((r) => ({
    job: job.name,
    firstAt: new Date(r.firstMs),
    lastAt: new Date(r.lastMs),
    count: r.count,
    exact: r.exact,
    reason: r.reason,
    outageStart: lastFiredMs === null ? null : new Date(lastFiredMs),
    outageEnd: new Date(nowMs),
  }));
}
