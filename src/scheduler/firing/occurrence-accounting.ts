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
 * had none), starting at its last fire (the catch-up goes on from there under the new schedule;
 * a runtime schedule's version that took effect later: then) or now; `planFrom`, where its catch-up starts: its last fire, else the start of an unchanged era (a
 * job that never fired was still due since its era began), else null (it starts from now).
 */
export function eraAtTenureStart(
  job: ScheduledJob,
  current: OpenEra | undefined,
  lastFiredMs: number | null,
  nowMs: number,
): { open: OpenEra | undefined; planFrom: number | null } {
  // From the last fire, or from when a runtime schedule's current version took effect if that is
  // later (it changed while no replica led); a job that never fired: from now.
  const from = Math.max(changedAtOf(job) ?? -Infinity, lastFiredMs ?? -Infinity);
  const open = changedEra(job, current, Number.isFinite(from) ? from : nowMs);
  if (!open && current) return { open, planFrom: lastFiredMs ?? Math.min(current.from.getTime(), nowMs) };
  return { open, planFrom: lastFiredMs };
}

/** When a runtime schedule's current version took effect (VersionedSchedule.changedAt); undefined for a job from code. */
export function changedAtOf(job: ScheduledJob): number | undefined {
  return (job.schedule as { changedAt?: number }).changedAt;
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
