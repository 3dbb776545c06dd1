/**
 * A catch-up plan's missed instants as the ledger stores them: ranges (first, last, count) by
 * reason, never one row per instant. planCatchUp fires the newest due instants, so the missed ones
 * are exactly the due instants in (last handled, first fired): at most two ranges, split where the
 * misfire policy's reach ends (older: out of reach; newer: in reach but over a bound).
 */
import type { CatchUpInput, CatchUpPlan } from './misfire.js';
import type { MissedReason } from './occurrence-reasons.js';
import type { FireSchedule } from './scheduled-job.js';

export interface MissedRange {
  firstMs: number;
  lastMs: number;
  count: number;
  /** False when the count is a lower bound (counting stopped at its budget). */
  exact: boolean;
  reason: MissedReason;
}

/** Instants of the in-reach range counted one by one before the count becomes a lower bound. */
const RECENT_BUDGET = 100_000;
/** Instants listed per step while looking for the last instant at or before a bound. */
const STEP_LIMIT = 10_000;

/** The ranges of `plan`'s missed instants, oldest first; [] when nothing was missed. */
export function missedRanges(input: CatchUpInput, plan: CatchUpPlan): MissedRange[] {
  const last = input.lastFiredMs;
  if (plan.missedCount === 0 || last === null) return [];
  const { schedule, nowMs, policy } = input;
  const reach = policy === 'skip' ? input.misfireGraceMs : Math.max(input.misfireGraceMs, input.catchUpWindowMs);
  const end = plan.fire.length > 0 ? plan.fire[0]! - 1 : nowMs;
  const outOfReach = nowMs - reach - 1; // instants at or before it are older than any policy reaches
  const recent = schedule.between(Math.max(last, outOfReach), end, RECENT_BUDGET);
  const recentExact = recent.length < RECENT_BUDGET;
  const ranges: MissedRange[] = [];
  const oldCount = plan.missedCount - recent.length;
  if (oldCount > 0) {
    const bound = Math.min(outOfReach, end);
    const lastOld =
      plan.missedBeyond === 0 ? plan.missed.filter((t) => t <= bound).at(-1) : lastAtOrBefore(schedule, bound, last);
    ranges.push({
      firstMs: plan.missed[0]!,
      lastMs: lastOld ?? bound,
      count: oldCount,
      exact: plan.missedCountExact && recentExact,
      reason: policy === 'skip' ? 'misfire-policy' : 'catch-up-window',
    });
  }
  if (recent.length > 0)
    ranges.push({
      firstMs: recent[0]!,
      lastMs: recent.at(-1)!,
      count: recent.length,
      exact: recentExact,
      reason: inReachReason(input, plan),
    });
  return ranges;
}

/** Why instants the policy could reach were not fired. */
function inReachReason(input: CatchUpInput, plan: CatchUpPlan): MissedReason {
  if (input.policy === 'skip') return 'max-fires'; // only on-time instants are in reach, and all fire unless over the bound
  if (input.policy === 'latest') return 'misfire-policy';
  const lateFired = plan.fire.filter((t) => input.nowMs - t > input.misfireGraceMs).length;
  return input.maxCatchUp !== undefined && lateFired >= input.maxCatchUp ? 'max-catch-up' : 'max-fires';
}

/** The schedule's last instant in (floor, bound], found by widening a window backwards from bound. */
export function lastAtOrBefore(schedule: FireSchedule, bound: number, floor: number): number | undefined {
  for (let span = 1000; ; span *= 8) {
    let from = Math.max(floor, bound - span);
    let found: number | undefined;
    for (;;) {
      const times = schedule.between(from, bound, STEP_LIMIT);
      if (times.length > 0) found = times.at(-1);
      if (times.length < STEP_LIMIT) break;
      from = times.at(-1)!;
    }
    if (found !== undefined) return found;
    if (bound - span <= floor) return undefined;
  }
}
