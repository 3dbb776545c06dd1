/**
 * Every due instant of a job in a range, with what happened and why (docs/concepts/occurrences.md),
 * from what the ledger holds: the schedule eras (which schedule made an instant due), the runs (an
 * instant with a run fired, or was skipped on record), the missed ranges, and the watermark (the
 * newest instant a leader accounted for). Pure: the ledger reads the rows, this walks them.
 *
 * Bounded: only instants that need a look-up of their own (a run, or a hole where one should be)
 * count against `limit`; a missed range, the span not yet due, and spans nobody accounted for yet
 * are jumped over and counted up to COUNT_LIMIT instants each. Consecutive instants with the same
 * answer collapse into one entry with a count.
 */
import { classifySkip, type MissedReason, type SkipReason } from './occurrence-reasons.js';
import { lastAtOrBefore } from './missed-ranges.js';
import type { FireSchedule } from './scheduled-job.js';

export const occurrenceOutcomes = ['fired', 'skipped', 'missed', 'not-yet-due', 'not-accounted', 'unanswered'] as const;
export type OccurrenceOutcome = (typeof occurrenceOutcomes)[number];

export interface TimelineRun {
  runId: string;
  atMs: number;
  state: string;
  trigger: string;
  error: string | null;
}

export interface TimelineMissed {
  firstMs: number;
  lastMs: number;
  count: number;
  exact: boolean;
  reason: MissedReason;
  outageStartMs: number | null;
  outageEndMs: number;
  leaderToken: string;
  leaderId: string;
}

/** A schedule era: instants in (fromMs, toMs] are due by `schedule` (null: it no longer parses). */
export interface TimelineEra {
  fromMs: number;
  toMs: number | null;
  schedule: FireSchedule | null;
  expression: string;
  timezone: string;
}

export interface TimelineInput {
  fromMs: number;
  toMs: number;
  nowMs: number;
  /** Oldest first. */
  eras: readonly TimelineEra[];
  /** The schedule to enumerate by before the first era (the job's current one), if any. */
  beforeEras?: FireSchedule | null;
  /** Scheduled runs in [fromMs, toMs], oldest first (manual and one-off runs are not due instants). */
  runs: readonly TimelineRun[];
  /** Missed ranges overlapping [fromMs, toMs], oldest first. */
  missed: readonly TimelineMissed[];
  /** The newest instant a leader accounted for (last fire or last missed instant); null: none. */
  watermarkMs: number | null;
  /** Runs finished before this may have been deleted by retention: a hole there is not a violation. */
  retainedFromMs?: number;
  /** At most this many instants looked at one by one. */
  limit: number;
  /** Wall-clock matches the eras' DST policy does not fire (CronSchedule.dstDropped), ascending. */
  dstDropped?: readonly number[];
}

/** What a DST-dropped wall time says. */
export const DST_TEXT = 'dropped by the DST policy: a repeated or skipped wall-clock time (dstRepeat, dstGap)';

export interface OccurrenceEntry {
  outcome: OccurrenceOutcome;
  firstMs: number;
  lastMs: number;
  count: number;
  /** False when `count` is a lower bound. */
  exact: boolean;
  /** fired / skipped: the run (the first one of a collapsed entry) and its state and trigger. */
  run?: { runId: string; state: string; trigger: string };
  /** skipped: the class of the reason, and its text (who paused, why, until when). */
  skip?: { reason: SkipReason; text: string | null };
  /** missed: why, the outage and the tenure that decided. */
  missed?: Omit<TimelineMissed, 'firstMs' | 'lastMs' | 'count' | 'exact'>;
  /** not-accounted: since when (the watermark or the era's start), and why. */
  notAccounted?: { sinceMs: number | null; why: 'before-first-era' | 'awaiting-leader' | 'retention' };
}

export interface Timeline {
  entries: OccurrenceEntry[];
  /** Instants looked at one by one (at most limit). */
  examined: number;
  /** Set when the limit stopped the walk: ask again from after this instant. */
  truncatedAfterMs: number | null;
}

/** Instants counted one by one in a jumped-over span before its count is a lower bound. */
export const COUNT_LIMIT = 100_000;

export function occurrenceTimeline(input: TimelineInput): Timeline {
  const { fromMs, toMs, nowMs } = input;
  const entries: OccurrenceEntry[] = [];
  const keys: string[] = []; // what makes two neighbouring entries one
  const add = (e: OccurrenceEntry, key: string) => {
    const prev = entries.at(-1);
    if (prev && keys.at(-1) === key) {
      prev.lastMs = e.lastMs;
      prev.count += e.count;
      prev.exact &&= e.exact;
      return;
    }
    entries.push(e);
    keys.push(key);
  };
  let runIndex = 0;
  let missedIndex = 0;
  const dropped = input.dstDropped ?? [];
  let dstIndex = 0;
  /** DST-dropped wall times at or before `upTo`, in their place among the answers. */
  const flushDst = (upTo: number) => {
    for (; dstIndex < dropped.length && dropped[dstIndex]! <= upTo; dstIndex++) {
      const d = dropped[dstIndex]!;
      if (d < fromMs || d > toMs) continue;
      add(
        { outcome: 'skipped', firstMs: d, lastMs: d, count: 1, exact: true, skip: { reason: 'dst', text: DST_TEXT } },
        'dst',
      );
    }
  };
  let examined = 0;
  let cursor = fromMs - 1; // every instant at or before the cursor has its answer
  while (cursor < toMs) {
    const span = spanAfter(input, cursor);
    const spanEnd = Math.min(span.endMs, toMs);
    const t = span.schedule?.nextAfter(cursor) ?? null;
    if (t === null || t > spanEnd) {
      cursor = spanEnd;
      continue;
    }
    flushDst(t);
    const nextDstMs = dropped[dstIndex] ?? Infinity; // a jump stops before it
    while (runIndex < input.runs.length && input.runs[runIndex]!.atMs < t) runIndex++;
    while (missedIndex < input.missed.length && input.missed[missedIndex]!.lastMs < t) missedIndex++;
    const run = input.runs[runIndex];
    const nextRunMs = run?.atMs ?? Infinity;
    const range = input.missed[missedIndex];
    if (run && run.atMs === t) {
      if (examined >= input.limit) return { entries, examined, truncatedAfterMs: cursor };
      examined++;
      add(...runEntry(run));
      cursor = t;
      continue;
    }
    if (t > nowMs) {
      const end = Math.min(spanEnd, nextRunMs - 1, nextDstMs - 1);
      add(counted('not-yet-due', span.schedule!, cursor, end), 'not-yet-due');
      cursor = end;
      continue;
    }
    if (range && range.firstMs <= t) {
      const end = Math.min(spanEnd, nextRunMs - 1, nextDstMs - 1, range.lastMs);
      const inside = range.firstMs === t && range.lastMs <= end; // the whole range: its stored count
      const entry = inside
        ? { outcome: 'missed' as const, firstMs: t, lastMs: range.lastMs, count: range.count, exact: range.exact }
        : counted('missed', span.schedule!, cursor, end);
      const why = {
        reason: range.reason,
        outageStartMs: range.outageStartMs,
        outageEndMs: range.outageEndMs,
        leaderToken: range.leaderToken,
        leaderId: range.leaderId,
      };
      add({ ...entry, missed: why }, `missed ${range.reason} ${range.firstMs}`);
      cursor = end;
      continue;
    }
    if (!span.inEra) {
      const end = Math.min(spanEnd, nextRunMs - 1, nextDstMs - 1);
      add(
        {
          ...counted('not-accounted', span.schedule!, cursor, end),
          notAccounted: { sinceMs: null, why: 'before-first-era' },
        },
        'before-first-era',
      );
      cursor = end;
      continue;
    }
    const watermark = input.watermarkMs;
    if (watermark === null || t > watermark) {
      const nextRangeMs = range?.firstMs ?? Infinity;
      const end = Math.min(spanEnd, nextRunMs - 1, nextRangeMs - 1, nextDstMs - 1, nowMs);
      const sinceMs = watermark ?? span.fromMs;
      add(
        { ...counted('not-accounted', span.schedule!, cursor, end), notAccounted: { sinceMs, why: 'awaiting-leader' } },
        `awaiting ${sinceMs}`,
      );
      cursor = end;
      continue;
    }
    if (examined >= input.limit) return { entries, examined, truncatedAfterMs: cursor };
    examined++;
    if (input.retainedFromMs !== undefined && t < input.retainedFromMs)
      add(
        {
          outcome: 'not-accounted',
          firstMs: t,
          lastMs: t,
          count: 1,
          exact: true,
          notAccounted: { sinceMs: null, why: 'retention' },
        },
        'retention',
      );
    else add({ outcome: 'unanswered', firstMs: t, lastMs: t, count: 1, exact: true }, 'unanswered');
    cursor = t;
  }
  flushDst(toMs);
  return { entries, examined, truncatedAfterMs: null };
}

/** The span of time after `cursor` with one schedule: an era, or the time before the first one. */
function spanAfter(
  input: TimelineInput,
  cursor: number,
): { schedule: FireSchedule | null; endMs: number; fromMs: number; inEra: boolean } {
  const first = input.eras[0];
  if (!first || cursor < first.fromMs)
    return {
      schedule: input.beforeEras ?? first?.schedule ?? null,
      endMs: first?.fromMs ?? Infinity,
      fromMs: -Infinity,
      inEra: false,
    };
  const era = input.eras.find((e) => e.toMs === null || e.toMs > cursor) ?? input.eras.at(-1)!;
  if (era.toMs !== null && era.toMs <= cursor)
    return { schedule: null, endMs: Infinity, fromMs: era.toMs, inEra: false };
  return { schedule: era.schedule, endMs: era.toMs ?? Infinity, fromMs: era.fromMs, inEra: true };
}

function runEntry(run: TimelineRun): [OccurrenceEntry, string] {
  const base = {
    firstMs: run.atMs,
    lastMs: run.atMs,
    count: 1,
    exact: true,
    run: { runId: run.runId, state: run.state, trigger: run.trigger },
  };
  if (run.state !== 'skipped') return [{ outcome: 'fired', ...base }, `fired ${run.state} ${run.trigger}`];
  const skip = { reason: classifySkip(run.error), text: run.error };
  // Coalesced skips name their waiting run, one text per run: collapse them by class.
  const key = skip.reason === 'coalesced' ? 'coalesced' : `skipped ${run.error ?? ''}`;
  return [{ outcome: 'skipped', ...base, skip }, key];
}

/** The instants of `schedule` in (after, end] as one entry, counted up to COUNT_LIMIT. */
function counted(outcome: OccurrenceOutcome, schedule: FireSchedule, after: number, end: number): OccurrenceEntry {
  const first = schedule.nextAfter(after)!;
  let count = 0;
  let last = first;
  let t: number | null = first;
  while (t !== null && t <= end) {
    if (count >= COUNT_LIMIT)
      return { outcome, firstMs: first, lastMs: lastAtOrBefore(schedule, end, last) ?? last, count, exact: false };
    count++;
    last = t;
    t = schedule.nextAfter(t);
  }
  return { outcome, firstMs: first, lastMs: last, count, exact: true };
}
