/**
 * Cron schedules: next fire times in an IANA time zone, computed against any instant, so an
 * injected clock can drive them.
 *
 * Expressions: the dialect in cron-pattern.ts (Vixie cron with optional seconds, nicknames, `L`
 * and `#`); anything else is refused with an InvalidScheduleError, as is a pattern that can never
 * fire (`0 0 31 2 *`).
 *
 * Daylight saving time. Fire times are wall-clock times in the schedule's zone, and:
 * - No wall-clock time fires twice. When clocks go back and an hour repeats, every time in it
 *   fires once, at its first occurrence (01:30 fires in the first 01:30, not again an hour later;
 *   `*\/15 * * * *` fires 01:00-01:45 once, then 02:00).
 * - No fixed time is lost. When clocks go forward and an hour does not exist, a time inside the
 *   gap (02:30 daily) fires once that day at the first instant after the gap (03:00 local),
 *   merged with a fire the schedule has at 03:00 anyway. A schedule whose hour field allows every hour
 *   (`*`, `0-23`) has nothing to make up: its times inside the gap do not exist and
 *   are not fired (`5 * * * *` fires 01:05, 03:05; Vixie cron treats such jobs the same way).
 * So in the repeated hour there is one fire per wall-clock time, and on the short day there is
 * one fire per fixed time.
 *
 * croner's own `timezone` option (9.1.0) shifts a gap time by the gap's length, is inconsistent
 * between zones in the repeated hour and slow (~600 µs per next run), so the work is split: the
 * pattern is matched in "wall-clock space" (the local time read as if it were UTC, cron-pattern.ts)
 * and the mapping from a wall-clock time to an instant, with the rules above, is done here over one
 * cached Intl formatter per zone.
 *
 * Memory: a schedule holds its two strings and a parsed pattern shared by every schedule with the
 * same expression; the pattern's field tables are shared too, and so is the schedule itself by
 * every job with the same expression and zone.
 */
import { InvalidConfigError, InvalidScheduleError } from '../errors.js';
import { nextWallMatch, parseCronPattern, type CronPattern } from './cron-pattern.js';

/** What a wall-clock time repeated by a fall-back change does: fire at its first, last or both occurrences. */
export type DstRepeat = 'first' | 'last' | 'both';
/** What a wall-clock time skipped by a spring-forward change does: fire at the first instant after the gap, or not. */
export type DstGap = 'shift' | 'skip';
export interface DstPolicy {
  repeat: DstRepeat;
  gap: DstGap;
}
export const DST_REPEATS: readonly DstRepeat[] = ['first', 'last', 'both'];
export const DST_GAPS: readonly DstGap[] = ['shift', 'skip'];

const DEFAULT_DST: Readonly<DstPolicy> = Object.freeze({ repeat: 'first', gap: 'shift' });

function dstPolicy(dst: Partial<DstPolicy>): Readonly<DstPolicy> {
  const repeat = dst.repeat ?? 'first';
  const gap = dst.gap ?? 'shift';
  if (!DST_REPEATS.includes(repeat))
    throw new InvalidConfigError('dstRepeat', `must be one of ${DST_REPEATS.join(', ')}, not "${String(repeat)}"`);
  if (!DST_GAPS.includes(gap))
    throw new InvalidConfigError('dstGap', `must be one of ${DST_GAPS.join(', ')}, not "${String(gap)}"`);
  return repeat === 'first' && gap === 'shift' ? DEFAULT_DST : Object.freeze({ repeat, gap });
}

/** Parsed patterns, shared by every schedule with the same expression (matching is stateless). */
const compiled = new Map<string, CronPattern>();
/**
 * Schedules by zone, DST policy and expression: a schedule is immutable, so a million jobs with 86,400
 * distinct expressions hold 86,400 schedules (and no copy of each expression string).
 */
const schedules = new Map<string, CronSchedule>();

const HOUR_MS = 3_600_000;
/** Offsets are compared this far either side of an instant to detect a nearby DST transition. */
const NEAR_MS = 36 * HOUR_MS;

export class CronSchedule {
  private constructor(
    readonly expression: string,
    readonly timezone: string,
    private readonly compiled: CronPattern,
    /** What a repeated and a skipped wall-clock time do (see DstPolicy). */
    readonly dst: Readonly<DstPolicy>,
  ) {}

  /**
   * Parse and validate; throws InvalidScheduleError (the expression) or InvalidConfigError naming
   * 'timezone'. `dst` defaults to { repeat: 'first', gap: 'shift' }.
   */
  static parse(expression: string, timezone = 'UTC', dst: Partial<DstPolicy> = {}): CronSchedule {
    if (typeof expression !== 'string' || expression.trim() === '') {
      throw new InvalidScheduleError(String(expression), 'must be a cron expression such as "*/5 * * * *"');
    }
    if (typeof timezone !== 'string' || timezone === '') throw badTimezone(String(timezone));
    const policy = dstPolicy(dst);
    const key = `${timezone} ${policy.repeat}/${policy.gap} ${expression}`;
    const known = schedules.get(key);
    if (known) return known;
    assertTimezone(timezone);
    let c = compiled.get(expression);
    if (!c) {
      c = parseCronPattern(expression);
      compiled.set(expression, c);
    }
    const schedule = new CronSchedule(expression, timezone, c, policy);
    schedules.set(key, schedule);
    return schedule;
  }

  /** The first fire time strictly after afterMs (epoch ms), or null if the schedule never fires again. */
  nextAfter(afterMs: number): number | null {
    if (isUtc(this.timezone)) return this.nextWall(afterMs);
    const here = transitionNear(afterMs, this.timezone);
    const found = this.scan(afterMs, here);
    const tr = here.transition;
    // dstRepeat 'last' / 'both' from before a fall-back: the second pass of the repeated hour lies
    // after every instant of the first pass, so a repeated wall time earlier than the ones scanned
    // can still be next.
    if (tr === null || tr.before <= tr.after || this.dst.repeat === 'first' || afterMs >= tr.at) return found;
    const w = this.nextWall(tr.at + tr.after - 1);
    const second = w !== null && w < tr.at + tr.before ? w - tr.after : null;
    if (second === null || second <= afterMs) return found;
    return found === null ? second : Math.min(found, second);
  }

  /** Walk wall-clock matches from afterMs's wall time, mapping each to its instant under the DST policy. */
  private scan(afterMs: number, here: { offset: number; transition: Transition | null }): number | null {
    let wallFrom: number;
    if (here.transition === null) {
      wallFrom = afterMs + here.offset;
    } else {
      const { at, before, after } = here.transition;
      wallFrom = afterMs + (afterMs < at ? before : after);
      // dstRepeat 'first': in the second pass of a repeated hour every wall time up to its end has
      // already had its occurrence; continue from the end of the repeated hour.
      const secondPass = before > after && afterMs >= at && afterMs < at + (before - after);
      if (secondPass && this.dst.repeat === 'first') wallFrom = at + before - 1;
    }
    for (let guard = 0; guard < 1000; guard++) {
      const wall = this.nextWall(wallFrom);
      if (wall === null) return null;
      const near =
        here.transition === null && wall - afterMs < NEAR_MS - 15 * HOUR_MS
          ? here // the wall time's instant lies inside the window already known to have no transition
          : transitionNear(wall, this.timezone);
      const mapped = near.transition === null ? wall - near.offset : this.instantOf(wall, near.transition, afterMs);
      if (mapped === 'gap') {
        wallFrom = near.transition!.at + near.transition!.after - 1; // skip the rest of the gap in one step
        continue;
      }
      if (mapped > afterMs) return mapped;
      wallFrom = wall;
    }
    return null;
  }

  /**
   * The instant a wall time near a transition fires at under the DST policy, the first one after
   * afterMs where a repeated time has two; 'gap' when a time inside a spring-forward gap does not fire
   * (dstGap 'skip', a schedule with every hour, or its shifted instant is already past).
   */
  private instantOf(wall: number, tr: Transition, afterMs: number): number | 'gap' {
    const { at, before, after } = tr;
    if (before < after) {
      if (wall < at + before) return wall - before;
      if (wall >= at + after) return wall - after;
      // Inside a spring-forward gap: the wall time does not exist.
      if (this.dst.gap === 'skip' || this.compiled.everyHour || at <= afterMs) return 'gap';
      return at;
    }
    if (wall < at + after) return wall - before;
    if (wall >= at + before) return wall - after;
    // A repeated wall time: first occurrence at wall - before, second at wall - after.
    if (this.dst.repeat === 'first') return wall - before;
    if (this.dst.repeat === 'last') return wall - after;
    return wall - before > afterMs ? wall - before : wall - after;
  }

  /** Fire times t with fromMs < t <= toMs, ascending, at most `limit` (default 10,000). */
  between(fromMs: number, toMs: number, limit = 10_000): number[] {
    const out: number[] = [];
    if (limit <= 0) return out;
    let t = this.nextAfter(fromMs);
    while (t !== null && t <= toMs && out.length < limit) {
      out.push(t);
      t = this.nextAfter(t);
    }
    return out;
  }

  /**
   * How DST touched the fire at `instant` (one this schedule returned): the first or second
   * occurrence of a repeated wall-clock time, or a time inside a spring-forward gap shifted to the
   * gap's end; null when no transition is near.
   */
  dstNote(instant: number): DstNote | null {
    if (isUtc(this.timezone)) return null;
    const { transition: tr } = transitionNear(instant, this.timezone);
    if (tr === null) return null;
    const { at, before, after } = tr;
    if (before > after) {
      if (instant >= at - (before - after) && instant < at) return 'repeated-first';
      if (instant >= at && instant < at + (before - after)) return 'repeated-second';
      return null;
    }
    if (instant !== at) return null;
    const w = this.nextWall(at + before - 1);
    return w !== null && w < at + after ? 'gap-shifted' : null;
  }

  /**
   * The wall-clock matches in (fromMs, toMs] the DST policy does not fire: the pass of a repeated
   * hour dstRepeat leaves out (as the instants they would have had), and the times inside a
   * spring-forward gap that are skipped (dstGap 'skip', an every-hour pattern) or folded into the
   * one fire at the gap's end (dstGap 'shift' fires the first of them there), each as the gap's
   * instant. Ascending, at most `limit`. They are not due instants; the occurrence reader lists them as skipped for 'dst'.
   */
  dstDropped(fromMs: number, toMs: number, limit = 1000): number[] {
    if (isUtc(this.timezone) || toMs <= fromMs) return [];
    const out: number[] = [];
    const seen = new Set<number>();
    for (let t = fromMs; t < toMs + NEAR_MS && out.length < limit; t += NEAR_MS) {
      const tr = transitionNear(t, this.timezone).transition;
      if (tr === null || seen.has(tr.at)) continue;
      seen.add(tr.at);
      const { at, before, after } = tr;
      const repeated = before > after;
      const [wallFrom, wallTo] = repeated ? [at + after, at + before] : [at + before, at + after];
      let shifted = !repeated && this.dst.gap === 'shift' && !this.compiled.everyHour;
      for (let w = this.nextWall(wallFrom - 1); w !== null && w < wallTo && out.length < limit; w = this.nextWall(w)) {
        let dropped: number | null;
        if (!repeated) {
          dropped = shifted ? null : at; // the first gap time fires at the gap's end; a wall time there has no instant of its own
          shifted = false;
        } else if (this.dst.repeat === 'first') dropped = w - after;
        else if (this.dst.repeat === 'last') dropped = w - before;
        else dropped = null;
        if (dropped !== null && dropped > fromMs && dropped <= toMs) out.push(dropped);
      }
    }
    return out.sort((a, b) => a - b);
  }

  toString(): string {
    return isUtc(this.timezone) ? this.expression : `${this.expression} (${this.timezone})`;
  }

  /** Next wall-clock time (as if it were UTC) matching the pattern, strictly after `wallMs`. */
  private nextWall(wallMs: number): number | null {
    return nextWallMatch(this.compiled, wallMs);
  }
}

/** See CronSchedule.dstNote. */
export type DstNote = 'repeated-first' | 'repeated-second' | 'gap-shifted';

/** Offset of `timezone` from UTC at instant t, in ms (local wall time = t + offset). */
export function zoneOffsetMs(t: number, timezone: string): number {
  return isUtc(timezone) ? 0 : offsetAt(t, timezone);
}

function isUtc(timezone: string): boolean {
  return timezone === 'UTC' || timezone === 'Etc/UTC';
}

function badTimezone(timezone: string): InvalidConfigError {
  return new InvalidConfigError(
    'timezone',
    `unknown time zone "${timezone}"; use an IANA name such as "Europe/Berlin" or "UTC"`,
  );
}

function assertTimezone(timezone: string): void {
  try {
    formatter(timezone);
  } catch {
    throw badTimezone(timezone);
  }
}

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(timezone: string): Intl.DateTimeFormat {
  let f = formatters.get(timezone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: timezone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    formatters.set(timezone, f);
  }
  return f;
}

/** Offset of `timezone` from UTC at instant t, in ms (wall = instant + offset). */
function offsetAt(t: number, timezone: string): number {
  const p: Record<string, number> = {};
  for (const part of formatter(timezone).formatToParts(new Date(t)))
    if (part.type !== 'literal') p[part.type] = Number(part.value);
  const wall = Date.UTC(p.year!, p.month! - 1, p.day, p.hour, p.minute, p.second);
  return wall - Math.floor(t / 1000) * 1000;
}

interface Transition {
  /** First instant (whole second) with the new offset. */
  readonly at: number;
  readonly before: number;
  readonly after: number;
}

/** Transitions found so far, per zone (a few per year; binary search is ~18 formatter calls). */
const transitions = new Map<string, Transition[]>();

/**
 * The offset at t when no DST transition lies within 36 hours of t, else that transition. Real
 * zones change offset months apart, so one transition per 72-hour window is assumed.
 */
function transitionNear(t: number, zone: string): { offset: number; transition: Transition | null } {
  const before = offsetAt(t - NEAR_MS, zone);
  const after = offsetAt(t + NEAR_MS, zone);
  if (before === after) return { offset: before, transition: null };
  let known = transitions.get(zone);
  if (!known) transitions.set(zone, (known = []));
  const cached = known.find((tr) => Math.abs(tr.at - t) <= NEAR_MS && tr.before === before && tr.after === after);
  if (cached) return { offset: before, transition: cached };
  let lo = Math.floor((t - NEAR_MS) / 1000); // offset `before` here
  let hi = Math.ceil((t + NEAR_MS) / 1000); // offset `after` here
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (offsetAt(mid * 1000, zone) === before) lo = mid;
    else hi = mid;
  }
  const transition = { at: hi * 1000, before, after };
  if (known.length >= 64) known.shift();
  known.push(transition);
  return { offset: before, transition };
}
