/**
 * The cron differential: random expressions of the documented dialect, each checked against the
 * brute-force oracle (cron-oracle.ts) in one zone around a DST change or another awkward date, and
 * in UTC over years. Shared by test/unit/cron-differential.test.ts (fixed seed, CI) and
 * bench/cron-differential.ts (more expressions).
 */
import { InvalidScheduleError } from '../../src/errors.js';
import { CronSchedule } from '../../src/cron/cron-schedule.js';
import {
  buildTimeline,
  oracleFiresInZone,
  oracleFiresUtc,
  oracleNeverFires,
  oracleParse,
  prng,
  transitions,
  type Timeline,
} from './cron-oracle.js';

export const ZONES = ['UTC', 'Europe/Berlin', 'America/New_York', 'Australia/Lord_Howe', 'Asia/Kolkata'] as const;

export interface DifferentialResult {
  expressions: number;
  refusedAsNeverFiring: number;
  zoneWindows: Record<string, number>;
  firesCompared: number;
  probesCompared: number;
  mismatches: string[];
  mismatchCount: number;
}

const DAY = 86_400_000;
const HOUR = 3_600_000;
/** Fires compared per window (the product costs ~10 µs a fire in a DST zone). */
const FIRES_PER_WINDOW = 40;

interface Anchor {
  zone: string;
  at: number;
  timeline?: Timeline;
}

/** DST changes in 2026-2027 of every zone, plus a leap day and a year end for each. */
function anchors(): Anchor[] {
  const out: Anchor[] = [];
  for (const zone of ZONES) {
    for (const at of transitions(zone, Date.UTC(2026, 0, 1), Date.UTC(2028, 0, 1))) out.push({ zone, at });
    out.push({ zone, at: Date.UTC(2028, 1, 28, 22) }, { zone, at: Date.UTC(2026, 11, 31, 20) });
  }
  return out;
}

export function runDifferential(
  count: number,
  seed: number,
  dst: { repeat: 'first' | 'last' | 'both'; gap: 'shift' | 'skip' } = { repeat: 'first', gap: 'shift' },
): DifferentialResult {
  const rnd = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const all = anchors();
  const byZone = new Map<string, Anchor[]>(ZONES.map((z) => [z, all.filter((a) => a.zone === z)]));
  const result: DifferentialResult = {
    expressions: 0,
    refusedAsNeverFiring: 0,
    zoneWindows: Object.fromEntries(ZONES.map((z) => [z, 0])),
    firesCompared: 0,
    probesCompared: 0,
    mismatches: [],
    mismatchCount: 0,
  };
  const mismatch = (what: string) => {
    result.mismatchCount++;
    if (result.mismatches.length < 20) result.mismatches.push(what.length > 700 ? `${what.slice(0, 700)}…` : what);
  };
  const iso = (xs: Array<number | null>) => xs.map((x) => (x === null ? 'null' : new Date(x).toISOString())).join(', ');

  for (let n = 0; n < count; n++) {
    const expr = randomExpression(rnd);
    result.expressions++;
    const spec = oracleParse(expr);
    if (!spec) {
      mismatch(`"${expr}": the generator made an expression the oracle does not read`);
      continue;
    }
    const anchor = pick(byZone.get(pick(ZONES))!);
    let schedule: CronSchedule;
    try {
      schedule = CronSchedule.parse(expr, anchor.zone, dst);
    } catch (err) {
      if (err instanceof InvalidScheduleError && /never fire/.test(err.message) && oracleNeverFires(spec))
        result.refusedAsNeverFiring++;
      else mismatch(`"${expr}": refused (${(err as Error).message}) but the oracle reads it and it fires`);
      continue;
    }
    // A window of up to 3 days starting at a random distance from the anchor (often minutes).
    const scale = pick([60_000, 10 * 60_000, HOUR, 6 * HOUR, DAY, 2 * DAY]);
    const from =
      anchor.at -
      Math.floor(rnd() * scale) +
      (rnd() < 0.2 ? Math.floor(rnd() * HOUR) : 0) +
      (rnd() < 0.5 ? 0 : Math.floor(rnd() * 1000));
    const to = from + 3 * DAY;
    anchor.timeline ??= buildTimeline(anchor.zone, anchor.at - 2 * DAY - 4 * HOUR, anchor.at + 4 * DAY);
    const expected = oracleFiresInZone(spec, anchor.timeline, from, to, FIRES_PER_WINDOW, dst);
    const got: number[] = [];
    for (let t: number | null = from; got.length < FIRES_PER_WINDOW;) {
      t = schedule.nextAfter(t);
      if (t === null || t > to) break;
      got.push(t);
    }
    result.zoneWindows[anchor.zone]!++;
    result.firesCompared += expected.length;
    if (iso(got) !== iso(expected)) {
      mismatch(`"${expr}" in ${anchor.zone} after ${iso([from])}: got [${iso(got)}], oracle [${iso(expected)}]`);
      continue;
    }
    // nextAfter from arbitrary instants, some inside a repeated or skipped hour.
    const last = expected.at(-1);
    for (let k = 0; k < 4 && last !== undefined; k++) {
      const q = k === 0 ? anchor.at - HOUR + Math.floor(rnd() * 2 * HOUR) : from + Math.floor(rnd() * (last - from));
      if (q < from || q >= last) continue;
      const want = expected.find((t) => t > q)!;
      const have = schedule.nextAfter(q);
      result.probesCompared++;
      if (have !== want)
        mismatch(`"${expr}" in ${anchor.zone}: nextAfter(${iso([q])}) = ${iso([have])}, oracle ${iso([want])}`);
    }
    // The calendar over years, in UTC (wall clock = instant).
    const utc = CronSchedule.parse(expr, 'UTC');
    const start = Date.UTC(1995, 0, 1) + Math.floor(rnd() * 85 * 365 * DAY) + Math.floor(rnd() * DAY);
    const years = 30;
    const want = oracleFiresUtc(spec, start, 6, years);
    const have: number[] = [];
    for (let t: number | null = start; have.length < 6;) {
      t = utc.nextAfter(t);
      if (t === null || new Date(t).getUTCFullYear() > new Date(start).getUTCFullYear() + years) break;
      have.push(t);
    }
    result.firesCompared += want.length;
    if (iso(have) !== iso(want))
      mismatch(`"${expr}" in UTC after ${iso([start])}: got [${iso(have)}], oracle [${iso(want)}]`);
  }
  return result;
}

/** A random expression of the dialect, biased towards the awkward parts (DST hours, month ends, L, #). */
export function randomExpression(rnd: () => number): string {
  const int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  if (rnd() < 0.03)
    return pick(['@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly', '@Daily']);
  const names = (lo: number, xs: string[]) => (v: number) =>
    rnd() < 0.3 && v - lo < xs.length ? caseOf(xs[v - lo]!) : String(v);
  const caseOf = (s: string) => pick([s, s.toUpperCase(), s[0]!.toUpperCase() + s.slice(1)]);
  const field = (
    lo: number,
    hi: number,
    bias: number[],
    show: (v: number) => string = String,
    extra?: () => string | null,
  ): string => {
    const value = () => (rnd() < 0.5 && bias.length ? pick(bias) : int(lo, hi));
    const item = (): string => {
      const e = extra?.();
      if (e) return e;
      const r = rnd();
      if (r < 0.35) return show(value());
      if (r < 0.5) return `*/${int(1, Math.min(hi - lo + 1, 20))}`;
      const a = value();
      const b = Math.min(hi, a + int(0, (hi - lo) / 2));
      if (r < 0.8) return `${show(a)}-${show(b)}`;
      return `${show(a)}-${show(b)}/${int(1, 6)}`;
    };
    const r = rnd();
    if (r < 0.35) return '*';
    if (r < 0.75) return item();
    return Array.from({ length: int(2, 3) }, item).join(',');
  };
  const seconds = rnd() < 0.25 ? field(0, 59, [0, 30, 59]) : null;
  const minute = field(0, 59, [0, 15, 30, 45, 59]);
  const hour = field(0, 23, [0, 1, 2, 3, 23]);
  const dom = field(1, 31, [1, 28, 29, 30, 31], String, () => (rnd() < 0.05 ? 'L' : null));
  const month = field(
    1,
    12,
    [1, 2, 3, 10, 11, 12],
    names(1, 'jan feb mar apr may jun jul aug sep oct nov dec'.split(' ')),
  );
  const dayName = names(0, 'sun mon tue wed thu fri sat'.split(' '));
  const dow = field(0, 7, [0, 1, 5, 6, 7], dayName, () => {
    const r = rnd();
    if (r < 0.06) return `${dayName(int(0, 7))}L`;
    if (r < 0.12) return `${dayName(int(0, 7))}#${int(1, 5)}`;
    return null;
  });
  return [seconds, minute, hour, dom, month, dow].filter((f) => f !== null).join(rnd() < 0.05 ? '\t' : ' ');
}
