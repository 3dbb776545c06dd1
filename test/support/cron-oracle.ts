/**
 * An independent oracle for cron schedules, for the differential test and bench: it reads the
 * dialect with its own small tokenizer (not src/cron/cron-pattern.ts) and finds fire times by
 * brute force, walking every minute instant of a window and asking Intl.DateTimeFormat for the
 * local wall-clock fields, then applying the product's DST rule as stated in the README:
 * - a wall-clock time fires at its first occurrence only (a repeated minute never fires again);
 * - when wall-clock time jumps forward, the skipped times that match fire once at the first
 *   instant after the jump, merged with that instant's own fire; unless the hour field allows all
 *   24 hours, in which case skipped times are simply lost.
 * Seconds (6 fields) are walked within each minute: every offset of these zones is a whole number
 * of minutes, which buildTimeline checks.
 */

export interface OracleSpec {
  seconds: Set<number>;
  minutes: Set<number>;
  hours: Set<number>;
  doms: Set<number>;
  domLast: boolean;
  months: Set<number>;
  /** 0..6, Sunday 0 */
  dows: Set<number>;
  /** [weekday, n] with n = 0 for "last" */
  dowSpecial: Array<[number, number]>;
  domStar: boolean;
  dowStar: boolean;
}

const MONTHS = 'jan feb mar apr may jun jul aug sep oct nov dec'.split(' ');
const DAYS = 'sun mon tue wed thu fri sat'.split(' ');
const NICK: Record<string, string> = {
  yearly: '0 0 1 1 *',
  annually: '0 0 1 1 *',
  monthly: '0 0 1 * *',
  weekly: '0 0 * * 0',
  daily: '0 0 * * *',
  midnight: '0 0 * * *',
  hourly: '0 * * * *',
};

/** The oracle's reading of an expression, or null if it is outside the documented dialect. */
export function oracleParse(expression: string): OracleSpec | null {
  if (expression.length > 200) return null;
  let text = expression.trim();
  if (text[0] === '@') {
    const n = NICK[text.slice(1).toLowerCase()];
    if (n === undefined) return null;
    text = n;
  }
  const f = text.split(/[ \t]+/);
  if (f.length === 5) f.unshift('0');
  if (f.length !== 6) return null;
  const spec: OracleSpec = {
    seconds: new Set(),
    minutes: new Set(),
    hours: new Set(),
    doms: new Set(),
    domLast: false,
    months: new Set(),
    dows: new Set(),
    dowSpecial: [],
    domStar: f[3]!.charAt(0) === '*',
    dowStar: f[5]!.charAt(0) === '*',
  };
  const ok =
    readList(f[0]!, 0, 59, null, spec.seconds) &&
    readList(f[1]!, 0, 59, null, spec.minutes) &&
    readList(f[2]!, 0, 23, null, spec.hours) &&
    readList(f[3]!, 1, 31, null, spec.doms, (item) =>
      item.toUpperCase() === 'L' ? ((spec.domLast = true), true) : false,
    ) &&
    readList(f[4]!, 1, 12, MONTHS, spec.months) &&
    readList(f[5]!, 0, 7, DAYS, spec.dows, (item) => {
      const m = /^([0-9]+|[a-z]+)(l|#([0-9]+))$/i.exec(item);
      if (!m) return false;
      const w = num(m[1]!, 0, 7, DAYS);
      if (w === null) return null;
      if (m[2]!.toLowerCase() === 'l') spec.dowSpecial.push([w % 7, 0]);
      else if (m[3]!.length === 1 && Number(m[3]) >= 1 && Number(m[3]) <= 5)
        spec.dowSpecial.push([w % 7, Number(m[3])]);
      else return null;
      return true;
    });
  if (!ok) return null;
  if (spec.dows.has(7)) {
    spec.dows.delete(7);
    spec.dows.add(0);
  }
  return spec;
}

/** special(item): true = consumed, false = not special, null = invalid. */
function readList(
  text: string,
  lo: number,
  hi: number,
  names: string[] | null,
  into: Set<number>,
  special?: (item: string) => boolean | null,
): boolean {
  for (const item of text.split(',')) {
    const s = special?.(item);
    if (s === null) return false;
    if (s === true) continue;
    const slash = item.split('/');
    if (slash.length > 2) return false;
    let step = 1;
    if (slash.length === 2) {
      if (!/^[0-9]{1,2}$/.test(slash[1]!)) return false;
      step = Number(slash[1]);
      if (step < 1 || step > hi - lo + 1) return false;
    }
    let a: number | null;
    let b: number | null;
    if (slash[0] === '*') {
      a = lo;
      b = hi;
    } else {
      const dash = slash[0]!.split('-');
      if (dash.length > 2) return false;
      if (dash.length === 1 && slash.length === 2) return false; // "5/15": a step needs a range
      a = num(dash[0]!, lo, hi, names);
      b = dash.length === 2 ? num(dash[1]!, lo, hi, names) : a;
      if (a === null || b === null || a > b) return false;
    }
    for (let v = a; v <= b; v += step) into.add(v);
  }
  return true;
}

function num(t: string, lo: number, hi: number, names: string[] | null): number | null {
  if (/^[0-9]{1,2}$/.test(t)) {
    const v = Number(t);
    return v >= lo && v <= hi ? v : null;
  }
  if (names && /^[a-zA-Z]{3}$/.test(t)) {
    const i = names.indexOf(t.toLowerCase());
    if (i >= 0) return names === MONTHS ? i + 1 : i;
  }
  return null;
}

/** Whether the local date y-m-d (m 1..12) is a fire day, by calendar arithmetic on Date. */
export function oracleDay(spec: OracleSpec, y: number, m: number, d: number): boolean {
  if (!spec.months.has(m)) return false;
  const date = (dd: number) => new Date(Date.UTC(y, m - 1, dd));
  const both = spec.domStar || spec.dowStar;
  const domHit = spec.doms.has(d) || (spec.domLast && date(d + 1).getUTCMonth() !== m - 1);
  if (both && !domHit) return false;
  if (!both && domHit) return true;
  // Now the answer is whether the day-of-week field matches.
  const weekday = date(d).getUTCDay();
  if (spec.dows.has(weekday)) return true;
  for (const [w, n] of spec.dowSpecial) {
    if (w !== weekday) continue;
    if (n === 0 && date(d + 7).getUTCMonth() !== m - 1) return true;
    if (n > 0) {
      let count = 0;
      for (let x = d; x >= 1; x -= 7) count++;
      if (count === n) return true;
    }
  }
  return false;
}

/** The first `limit` fires in UTC strictly after fromMs, day by day, up to `years` ahead. */
export function oracleFiresUtc(spec: OracleSpec, fromMs: number, limit: number, years: number): number[] {
  const out: number[] = [];
  const start = new Date(fromMs);
  const sorted = (s: Set<number>) => [...s].sort((a, b) => a - b);
  const [hs, ms, ss] = [sorted(spec.hours), sorted(spec.minutes), sorted(spec.seconds)];
  for (
    let day = Date.UTC(start.getUTCFullYear(), start.getUTCMonth(), start.getUTCDate());
    out.length < limit;
    day += 86_400_000
  ) {
    const d = new Date(day);
    if (d.getUTCFullYear() > start.getUTCFullYear() + years) break;
    if (!oracleDay(spec, d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate())) continue;
    for (const h of hs)
      for (const mi of ms)
        for (const s of ss) {
          const t = day + h * 3_600_000 + mi * 60_000 + s * 1000;
          if (t > fromMs && out.length < limit) out.push(t);
        }
  }
  return out;
}

/** True if no day of the 400-year Gregorian cycle 2000-2399 matches (so the pattern never fires). */
export function oracleNeverFires(spec: OracleSpec): boolean {
  for (let y = 2000; y < 2400; y++) {
    for (let m = 1; m <= 12; m++) {
      if (!spec.months.has(m)) continue;
      const days = new Date(Date.UTC(y, m, 0)).getUTCDate(); // day 0 of the next month: this month's last
      for (let d = 1; d <= days; d++) if (oracleDay(spec, y, m, d)) return false;
    }
  }
  return true;
}

const formatters = new Map<string, Intl.DateTimeFormat>();
function formatterFor(zone: string): Intl.DateTimeFormat {
  return new Intl.DateTimeFormat('en-GB', {
    timeZone: zone,
    hourCycle: 'h23',
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
  });
}

export interface Timeline {
  readonly zone: string;
  /** First minute instant (epoch ms). */
  readonly start: number;
  /** Local wall-clock time of each minute instant, written as if UTC (ms). */
  readonly wall: Float64Array;
}

/** Local wall-clock times of every minute instant in [fromMs, toMs), from Intl.DateTimeFormat. */
export function buildTimeline(zone: string, fromMs: number, toMs: number): Timeline {
  const fmt = formatters.get(zone) ?? formatters.set(zone, formatterFor(zone)).get(zone)!;
  const start = Math.ceil(fromMs / 60_000) * 60_000;
  const n = Math.floor((toMs - start) / 60_000);
  const wall = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    // format() rather than formatToParts(): the same fields, three times faster. en-GB: "dd/mm/yyyy, hh:mm:ss".
    const text = fmt.format(start + i * 60_000);
    const m = /^(\d\d)\/(\d\d)\/(\d{4}), (\d\d):(\d\d):(\d\d)$/.exec(text);
    if (!m) throw new Error(`unexpected local time "${text}" in ${zone}`);
    if (m[6] !== '00') throw new Error(`${zone} has an offset that is not whole minutes`);
    wall[i] = Date.UTC(Number(m[3]), Number(m[2]) - 1, Number(m[1]), Number(m[4]), Number(m[5]));
  }
  return { zone, start, wall };
}

/**
 * Fires in (fromMs, toMs] by walking the timeline's minute instants, at most `limit`. The walk
 * starts at the timeline's start, which must lie a few hours before fromMs so that the first
 * occurrence of a repeated wall-clock time is known.
 */
export function oracleFiresInZone(
  spec: OracleSpec,
  tl: Timeline,
  fromMs: number,
  toMs: number,
  limit: number,
  dst: { repeat: 'first' | 'last' | 'both'; gap: 'shift' | 'skip' } = { repeat: 'first', gap: 'shift' },
): number[] {
  const out: number[] = [];
  const secs = [...spec.seconds].sort((a, b) => a - b);
  const everyHour = spec.hours.size === 24;
  const days = new Map<number, boolean>();
  const minuteMatches = (wallMs: number): boolean => {
    // Wall times here are after 1970, so hour and minute are plain arithmetic on the ms.
    if (!spec.hours.has(Math.floor(wallMs / 3_600_000) % 24) || !spec.minutes.has(Math.floor(wallMs / 60_000) % 60))
      return false;
    const key = Math.floor(wallMs / 86_400_000);
    let ok = days.get(key);
    if (ok === undefined) {
      const d = new Date(wallMs);
      days.set(key, (ok = oracleDay(spec, d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate())));
    }
    return ok;
  };
  let maxWall = -Infinity;
  for (let i = 0; i < tl.wall.length && out.length < limit; i++) {
    const t = tl.start + i * 60_000;
    if (t > toMs) break;
    const w = tl.wall[i]!;
    let madeUp = false;
    if (i > 0 && w - tl.wall[i - 1]! > 60_000 && !everyHour && dst.gap === 'shift') {
      for (let skipped = tl.wall[i - 1]! + 60_000; skipped < w; skipped += 60_000)
        if (minuteMatches(skipped)) madeUp = true;
    }
    const repeated = w <= maxWall;
    maxWall = Math.max(maxWall, w);
    // dstRepeat: 'first' fires a repeated minute at its first occurrence, 'last' at its last one
    // (none of the next three hours of instants shows the same wall time), 'both' at each.
    if (dst.repeat === 'first' && repeated) continue;
    if (dst.repeat === 'last' && occursAgain(tl, i, w)) continue;
    const here = minuteMatches(w) ? secs.map((s) => t + s * 1000) : [];
    if (madeUp && here[0] !== t) here.unshift(t);
    for (const f of here) if (f > fromMs && f <= toMs && out.length < limit) out.push(f);
  }
  return out;
}

function occursAgain(tl: Timeline, i: number, w: number): boolean {
  for (let j = i + 1; j < Math.min(tl.wall.length, i + 180); j++) if (tl.wall[j] === w) return true;
  return false;
}

/** Instants (whole minutes) where the zone's offset changes in [fromMs, toMs), found by an hourly scan. */
export function transitions(zone: string, fromMs: number, toMs: number): number[] {
  const hourly = buildTimelineHours(zone, fromMs, toMs);
  const out: number[] = [];
  for (let i = 1; i < hourly.length; i++) {
    if (hourly[i]!.offset === hourly[i - 1]!.offset) continue;
    const tl = buildTimeline(zone, hourly[i - 1]!.t, hourly[i]!.t + 60_000);
    for (let j = 1; j < tl.wall.length; j++)
      if (tl.wall[j]! - tl.wall[j - 1]! !== 60_000) out.push(tl.start + j * 60_000);
  }
  return out;
}

function buildTimelineHours(zone: string, fromMs: number, toMs: number): Array<{ t: number; offset: number }> {
  const out: Array<{ t: number; offset: number }> = [];
  for (let t = fromMs; t < toMs; t += 3_600_000) {
    const tl = buildTimeline(zone, t, t + 60_000);
    out.push({ t, offset: tl.wall[0]! - tl.start });
  }
  return out;
}

/** The drill's seeded PRNG (mulberry32), so a failing expression can be replayed from its seed. */
export { seededRandom as prng } from '../../src/drill/faults.js';
