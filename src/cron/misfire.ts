import type { MisfirePolicy } from './scheduled-job.js';
import type { FireSchedule } from './scheduled-job.js';

/**
 * What to do with the instants a job was due at while nobody fired it. All instants are epoch ms,
 * ascending. Every due instant is either in `fire` or counted as missed (missedCount).
 */
export interface CatchUpPlan {
  /** Scheduled instants to fire now. */
  fire: number[];
  /**
   * Missed instants, listed: the oldest ones (up to 10,000) and the missed ones among the newest
   * few thousand. Logged and counted, never fired.
   */
  missed: number[];
  /** Further missed instants, counted but not listed (a very long outage of a frequent job). */
  missedBeyond: number;
  /** All missed instants: missed.length + missedBeyond. */
  missedCount: number;
  /**
   * False when counting stopped at its budget (about 100,000 instants past the listed ones), so
   * missedCount is a lower bound. Planning one job never walks more than that.
   */
  missedCountExact: boolean;
}

export interface CatchUpInput {
  schedule: FireSchedule;
  policy: MisfirePolicy;
  /** Last instant already handled (fired, skipped or missed); null if the job never fired. */
  lastFiredMs: number | null;
  nowMs: number;
  catchUpWindowMs: number;
  misfireGraceMs: number;
  /** Upper bound on fires returned, so a long backlog cannot flood the queue. Default 1,000. */
  maxFires?: number;
  /**
   * The job's maxCatchUp: at most this many late instants fire (the newest; on-time ones do not
   * count); the older late ones are missed. Default: no bound beyond maxFires.
   */
  maxCatchUp?: number;
}

/** Missed instants listed in a plan, oldest first; the rest are only counted. */
const MISSED_LIST_LIMIT = 10_000;
/** Missed instants counted one by one beyond the listed ones before giving a lower bound. */
const COUNT_BUDGET = 100_000;

/**
 * Decide what to fire for the instants in (lastFired, now].
 * - An instant within misfireGraceMs of now is on time: it fires whatever the policy.
 * - Older ones follow the policy: 'all' fires those within catchUpWindowMs of now, 'latest' only
 *   the newest of those (and none if an on-time instant fires anyway), 'skip' none.
 * - At most maxCatchUp late instants fire, the newest, all at once (not spread); the older late
 *   ones are missed. Then at most maxFires fire in all, the newest; the older excess is missed.
 * - A job that never fired (lastFiredMs null) catches nothing up: it starts from now.
 * Cost is bounded whatever the outage: only the newest instants are enumerated in full (found by
 * bisection from now backwards), older ones are listed up to a limit and then counted.
 */
export function planCatchUp(input: CatchUpInput): CatchUpPlan {
  const { schedule, policy, nowMs, misfireGraceMs: grace } = input;
  const plan: CatchUpPlan = { fire: [], missed: [], missedBeyond: 0, missedCount: 0, missedCountExact: true };
  if (input.lastFiredMs === null || input.lastFiredMs >= nowMs) return plan;
  const last = input.lastFiredMs;
  const cap = Math.max(0, input.maxFires ?? 1000);
  // Nothing older than `reach` can fire under any policy.
  const reach = policy === 'skip' ? grace : Math.max(grace, input.catchUpWindowMs);
  const horizon = Math.max(last, nowMs - reach - 1); // between() excludes its start; now - reach is still in reach
  const { times: newest, start } = newestIn(schedule, horizon, nowMs, Math.max(cap, 1));

  const onTime = newest.filter((t) => nowMs - t <= grace);
  const late = newest.filter((t) => nowMs - t > grace && nowMs - t <= input.catchUpWindowMs);
  let chosen: number[];
  switch (policy) {
    case 'all':
      chosen = late;
      break;
    case 'latest':
      chosen = onTime.length > 0 ? [] : late.slice(-1);
      break;
    case 'skip':
      chosen = [];
      break;
  }
  const maxLate = Math.max(0, input.maxCatchUp ?? Infinity);
  if (chosen.length > maxLate) chosen = chosen.slice(chosen.length - maxLate);
  const fireSet = new Set([...chosen, ...onTime]);
  let fire = newest.filter((t) => fireSet.has(t));
  if (fire.length > cap) fire = fire.slice(fire.length - cap); // keep the newest; the oldest are missed
  const fired = new Set(fire);
  plan.fire = fire;

  // Everything in (last, start] is missed: list the oldest, count the rest within a budget.
  const older = schedule.between(last, start, MISSED_LIST_LIMIT);
  if (older.length === MISSED_LIST_LIMIT) {
    let t = schedule.nextAfter(older.at(-1)!);
    while (t !== null && t <= start) {
      if (plan.missedBeyond >= COUNT_BUDGET) {
        plan.missedCountExact = false;
        break;
      }
      plan.missedBeyond++;
      t = schedule.nextAfter(t);
    }
  }
  plan.missed = older.concat(newest.filter((t) => !fired.has(t)));
  plan.missedCount = plan.missed.length + plan.missedBeyond;
  return plan;
}

/**
 * The due instants in (start, to] for some start >= from, complete and ascending, with at least
 * k of them unless start === from. Enumerates at most a few times 4k instants: when (from, to]
 * holds more, the start is found by bisection (a schedule fires at most once a second, so a
 * span one second longer holds at most one more instant and the search always lands).
 */
function newestIn(schedule: FireSchedule, from: number, to: number, k: number): { times: number[]; start: number } {
  const most = 4 * k + 16;
  const all = schedule.between(from, to, most);
  if (all.length < most) return { times: all, start: from };
  // Guess the span holding ~2k instants from the density at the start of the range.
  let span = Math.max(1000, Math.ceil(((2 * k) / most) * (all.at(-1)! - from)));
  let lo = 0; // a span known to hold fewer than k
  let hi = to - from; // a span known to hold `most` or more
  for (let i = 0; i < 80; i++) {
    const start = Math.max(from, to - span);
    const times = schedule.between(start, to, most);
    if (times.length >= most) {
      hi = span;
      span = lo > 0 ? Math.floor((lo + hi) / 2) : Math.floor(span / 2);
    } else if (times.length < k && start > from) {
      lo = span;
      span = Math.min(2 * span, Math.floor((lo + hi) / 2));
    } else {
      return { times, start };
    }
  }
  // Unreachable for real schedules; fall back to the newest `most` the last bracket gives.
  const start = to - lo;
  return { times: schedule.between(start, to, most), start };
}
