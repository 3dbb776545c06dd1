/**
 * The cron dialect cronwarden accepts, parsed into lookup tables, and the next matching time in
 * "wall-clock space" (a local date and time written as if it were UTC; cron-schedule.ts maps it to
 * an instant in the schedule's zone).
 *
 * The dialect (the README's "Cron expressions" table is the user-facing copy):
 * - 5 fields `minute hour day-of-month month day-of-week`, or 6 with a leading `second`;
 * - per field a list of `*`, `*\/step`, `n`, `a-b`, `a-b/step`; names jan-dec and sun-sat (any
 *   case); day-of-week 0-7 with 0 and 7 both Sunday; ranges do not wrap;
 * - `L` in day-of-month (the month's last day); `<weekday>L` (the month's last such weekday) and
 *   `<weekday>#<1-5>` (the nth such weekday) in day-of-week, with Vixie's numbering (5 = Friday);
 * - @yearly @annually @monthly @weekly @daily @midnight @hourly;
 * - day-of-month and day-of-week as in Vixie cron: if either field starts with `*` (so also
 *   `*\/2`) a day must match both, otherwise either (`0 0 1 * 1`: the 1st and every Monday;
 *   `0 0 *\/2 * 1`: Mondays with an odd day-of-month). Vixie's cron.c tests exactly this, with the
 *   "star" flags set from each field's first character.
 * Everything else (`?`, `W`, `N/step` without a range, a bare `/5`, `L-3`, 7 fields…) is refused
 * with an InvalidScheduleError naming the field, and so is a pattern no date can ever match.
 *
 * Hand-written rather than croner (9.1.0, and still a different rule in later versions): croner
 * reads `5L` as `5`, loses fires with `#` next to a day-of-month list, combines `*\/2` with a
 * weekday by OR, and accepts `/5`; its parser cannot be told to refuse what it would misread. The
 * matcher here is a few table lookups per field, faster than croner's search.
 */
import { InvalidScheduleError } from '../errors.js';

export interface CronPattern {
  /** next[v]: the smallest allowed value >= v, or -1; one slot past the field's maximum is -1. */
  readonly seconds: Int8Array;
  readonly minutes: Int8Array;
  readonly hours: Int8Array;
  readonly months: Int8Array;
  /** Bit d-1 for day-of-month d; `L` as domLast. */
  readonly domMask: number;
  readonly domLast: boolean;
  /** Bit w for weekday w (0 = Sunday); `wL` in dowLastMask; `w#k` in dowNth[k-1] (empty if none). */
  readonly dowMask: number;
  readonly dowLastMask: number;
  readonly dowNth: readonly number[];
  /** Vixie: a day field starts with `*`, so a day must match both fields (else either). */
  readonly dayAnd: boolean;
  /** The hour field allows all 24 hours (DST gap times are skipped, not made up). */
  readonly everyHour: boolean;
}

const NICKNAMES: Readonly<Record<string, string>> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
};

interface Field {
  readonly name: string;
  readonly min: number;
  readonly max: number;
  readonly names?: readonly string[];
}
const SECOND: Field = { name: 'second', min: 0, max: 59 };
const MINUTE: Field = { name: 'minute', min: 0, max: 59 };
const HOUR: Field = { name: 'hour', min: 0, max: 23 };
const DOM: Field = { name: 'day-of-month', min: 1, max: 31 };
const MONTH: Field = {
  name: 'month',
  min: 1,
  max: 12,
  names: ['', 'jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'],
};
const DOW: Field = { name: 'day-of-week', min: 0, max: 7, names: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] };

const MAX_LENGTH = 200;

/** Parse an expression of the dialect; throws InvalidScheduleError (setting "schedule"). */
export function parseCronPattern(expression: string): CronPattern {
  const refuse = (reason: string) => new InvalidScheduleError(expression, reason);
  if (expression.length > MAX_LENGTH) throw refuse(`longer than ${MAX_LENGTH} characters`);
  const trimmed = expression.trim();
  let text = trimmed;
  if (trimmed.startsWith('@')) {
    const expanded = NICKNAMES[trimmed.toLowerCase()];
    if (!expanded) throw refuse(`unknown nickname; use one of ${Object.keys(NICKNAMES).join(' ')}`);
    text = expanded;
  }
  const parts = text.split(/[ \t]+/);
  if (parts.length !== 5 && parts.length !== 6) {
    throw refuse(
      `expected 5 or 6 fields but got ${parts.length} (minute hour day-of-month month day-of-week, optionally a leading second)`,
    );
  }
  const [sec, min, hour, dom, month, dow] = parts.length === 6 ? parts : ['0', ...parts];
  const fail = (field: Field, reason: string) => refuse(`${field.name}: ${reason}`);
  const seconds = parseField(sec!, SECOND, fail);
  const minutes = parseField(min!, MINUTE, fail);
  const hours = parseField(hour!, HOUR, fail);
  const doms = parseField(dom!, DOM, fail);
  const months = parseField(month!, MONTH, fail);
  const dows = parseField(dow!, DOW, fail);
  let dowMask = 0;
  for (let w = 0; w <= 7; w++) if (dows.values[w]) dowMask |= 1 << (w % 7);
  let domMask = 0;
  for (let d = 1; d <= 31; d++) if (doms.values[d]) domMask |= 1 << (d - 1);
  const pattern: CronPattern = {
    seconds: nextTable(seconds.values, 59),
    minutes: nextTable(minutes.values, 59),
    hours: nextTable(hours.values, 23),
    months: nextTable(months.values, 12),
    domMask,
    domLast: doms.last,
    dowMask,
    dowLastMask: dows.lastMask,
    dowNth: dows.nth.some((m) => m !== 0) ? dows.nth : NO_NTH,
    dayAnd: dom!.startsWith('*') || dow!.startsWith('*'),
    everyHour: hours.values.filter(Boolean).length === 24,
  };
  if (!canEverMatch(pattern)) {
    throw refuse(
      `no date matches day-of-month ${q(dom!)} in month ${q(month!)}${pattern.dayAnd && dow !== '*' ? ` and day-of-week ${q(dow!)}` : ''}, so it would never fire`,
    );
  }
  return pattern;
}

interface ParsedField {
  readonly values: boolean[];
  /** day-of-month `L` */
  last: boolean;
  /** day-of-week `wL` */
  lastMask: number;
  /** day-of-week `w#k`: nth[k-1] has bit w */
  readonly nth: number[];
}

type Fail = (field: Field, reason: string) => InvalidScheduleError;

function parseField(text: string, field: Field, fail: Fail): ParsedField {
  const out: ParsedField = {
    values: new Array<boolean>(field.max + 1).fill(false),
    last: false,
    lastMask: 0,
    nth: [0, 0, 0, 0, 0],
  };
  for (const item of text.split(',')) {
    if (item === '') throw fail(field, `empty item in the list ${q(text)}`);
    parseItem(item, field, out, fail);
  }
  return out;
}

function parseItem(item: string, field: Field, out: ParsedField, fail: Fail): void {
  let m: RegExpExecArray | null;
  const set = (lo: number, hi: number, step: number) => {
    for (let v = lo; v <= hi; v += step) out.values[v] = true;
  };
  if ((m = /^\*(?:\/([^/]*))?$/.exec(item))) {
    set(field.min, field.max, m[1] === undefined ? 1 : step(m[1], field, fail));
  } else if ((m = /^([^-/#]+)-([^-/#]+)(?:\/([^/]*))?$/.exec(item))) {
    const lo = value(m[1]!, field, fail);
    const hi = value(m[2]!, field, fail);
    if (lo > hi)
      throw fail(
        field,
        `the range ${q(item)} goes backwards; ranges do not wrap around (write two ranges${field === DOW ? ', and 7 for a Sunday at the end' : ''})`,
      );
    set(lo, hi, m[3] === undefined ? 1 : step(m[3], field, fail));
  } else if (/^[^-/#]*\//.test(item)) {
    throw fail(field, `${q(item)}: a step needs "*" or a range before it ("*/15", "5-59/15")`);
  } else if (field === DOM && /^l$/i.test(item)) {
    out.last = true;
  } else if (field === DOW && (m = /^([^-/#]+)l$/i.exec(item)) && !/^l$/i.test(item)) {
    out.lastMask |= 1 << (value(m[1]!, field, fail) % 7);
  } else if (field === DOW && (m = /^([^-/#]+)#(.*)$/.exec(item))) {
    const w = value(m[1]!, field, fail) % 7;
    if (!/^[1-5]$/.test(m[2]!)) throw fail(field, `${q(item)}: the n in "weekday#n" must be 1 to 5`);
    out.nth[Number(m[2]) - 1]! |= 1 << w;
  } else if (/^[^-/#]+$/.test(item)) {
    const v = value(item, field, fail);
    out.values[v] = true;
  } else {
    throw fail(field, `${q(item)} is not a number, name, range, "*" or step${unsupportedHint(item, field)}`);
  }
}

function value(text: string, field: Field, fail: Fail): number {
  if (/^\d{1,2}$/.test(text)) {
    const v = Number(text);
    if (v < field.min || v > field.max) throw fail(field, `${text} is out of range ${field.min}-${field.max}`);
    return v;
  }
  const named = field.names && /^[a-z]{3}$/i.test(text) ? field.names.indexOf(text.toLowerCase()) : -1;
  if (named > 0 || (named === 0 && field === DOW)) return named;
  throw fail(
    field,
    `${q(text)} is not a number ${field.min}-${field.max}${field.names ? ` or a name (${field.names.filter(Boolean).join(' ')})` : ''}${unsupportedHint(text, field)}`,
  );
}

function step(text: string, field: Field, fail: Fail): number {
  const size = field.max - field.min + 1;
  if (!/^\d{1,2}$/.test(text) || Number(text) < 1 || Number(text) > size)
    throw fail(field, `step ${q(text)} must be a whole number from 1 to ${size}`);
  return Number(text);
}

/** Why a Quartz or croner extension is not read: better refused than misread. */
function unsupportedHint(text: string, field: Field): string {
  if (text.includes('?')) return '; "?" is not supported, use "*"';
  if (/w/i.test(text) && field === DOM) return '; "W" (nearest weekday) is not supported';
  if (/l/i.test(text))
    return '; "L" is supported only alone in day-of-month or as "<weekday>L" (5L: last Friday) in day-of-week';
  if (text.includes('#')) return '; "#" is supported only in day-of-week, as "<weekday>#<1-5>" (5#2: second Friday)';
  return '';
}

/** A part of the expression in a message: JSON-quoted (no raw control characters), at most 40 characters. */
function q(text: string): string {
  return JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text);
}

const NO_NTH: readonly number[] = [];

/** Shared tables: most schedules share their second, hour and month fields. */
const tables = new Map<string, Int8Array>();

function nextTable(values: readonly boolean[], max: number): Int8Array {
  const key = `${max}:${values.map((v) => (v ? 1 : 0)).join('')}`;
  let table = tables.get(key);
  if (!table) {
    table = new Int8Array(max + 2).fill(-1);
    for (let v = max; v >= 0; v--) table[v] = values[v] ? v : table[v + 1]!;
    tables.set(key, table);
  }
  return table;
}

function daysInMonth(year: number, month: number): number {
  return month === 2
    ? year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0)
      ? 29
      : 28
    : 30 + ((month + (month >> 3)) & 1);
}

function dayMatches(p: CronPattern, day: number, monthLength: number, weekday: number): boolean {
  const dom = ((p.domMask >>> (day - 1)) & 1) === 1 || (p.domLast && day === monthLength);
  const dow =
    ((p.dowMask >>> weekday) & 1) === 1 ||
    (((p.dowLastMask >>> weekday) & 1) === 1 && day + 7 > monthLength) ||
    (p.dowNth.length > 0 && ((p.dowNth[((day - 1) / 7) | 0]! >>> weekday) & 1) === 1);
  return p.dayAnd ? dom && dow : dom || dow;
}

/**
 * Whether some date matches. Over the 400-year Gregorian cycle every (month, day) falls on every
 * weekday in both leap and common years, so trying each combination is exact.
 */
function canEverMatch(p: CronPattern): boolean {
  for (let month = 1; month <= 12; month++) {
    if (p.months[month] !== month) continue;
    for (const length of month === 2 ? [28, 29] : [daysInMonth(2001, month)]) {
      for (let day = 1; day <= length; day++)
        for (let w = 0; w < 7; w++) if (dayMatches(p, day, length, w)) return true;
    }
  }
  return false;
}

const DAY_MS = 86_400_000;

/** The first whole second strictly after wallMs whose wall-clock fields match, or null (none within 400 years). */
export function nextWallMatch(p: CronPattern, wallMs: number): number | null {
  if (!Number.isFinite(wallMs)) return null;
  const start = new Date((Math.floor(wallMs / 1000) + 1) * 1000);
  const c: WallCursor = {
    year: start.getUTCFullYear(),
    month: start.getUTCMonth() + 1,
    day: start.getUTCDate(),
    hour: start.getUTCHours(),
    minute: start.getUTCMinutes(),
    second: start.getUTCSeconds(),
  };
  const lastYear = c.year + 400;
  // Each step moves the cursor forward to its field's next allowed value; one that carries into
  // a field above answers false, and the search looks again from the month.
  for (;;) {
    if (!alignMonth(p, c, lastYear)) return null;
    const length = daysInMonth(c.year, c.month);
    if (!alignDay(p, c, length)) continue;
    if (alignTime(p, c, length)) return Date.UTC(c.year, c.month - 1, c.day, c.hour, c.minute, c.second);
  }
}

/** A wall-clock time being searched forward, field by field (month 1-12). */
interface WallCursor {
  year: number;
  month: number;
  day: number;
  hour: number;
  minute: number;
  second: number;
}

/** Month: jump to the next allowed one (next year if none is left); false past lastYear. */
function alignMonth(p: CronPattern, c: WallCursor, lastYear: number): boolean {
  const m = p.months[c.month]!;
  if (m === c.month) return true;
  if (m === -1) {
    c.year++;
    if (c.year > lastYear) return false;
    c.month = p.months[1]!;
  } else c.month = m;
  c.day = 1;
  c.hour = c.minute = c.second = 0;
  return true;
}

/** Day: step through the month's days; false when none is left (carried into the next month). */
function alignDay(p: CronPattern, c: WallCursor, length: number): boolean {
  let weekday = ((((Date.UTC(c.year, c.month - 1, c.day) / DAY_MS + 4) % 7) + 7) % 7) | 0;
  if (!dayMatches(p, c.day, length, weekday)) {
    c.hour = c.minute = c.second = 0;
    do {
      c.day++;
      weekday = (weekday + 1) % 7;
    } while (c.day <= length && !dayMatches(p, c.day, length, weekday));
  }
  if (c.day > length) {
    c.month++;
    c.day = 1;
    return false;
  }
  return true;
}

/** Time of day: each field jumps to its next allowed value or carries into the one above (false). */
function alignTime(p: CronPattern, c: WallCursor, length: number): boolean {
  const h = p.hours[c.hour]!;
  if (h === -1) {
    c.day++;
    c.hour = c.minute = c.second = 0;
    if (c.day > length) {
      c.month++;
      c.day = 1;
    }
    return false;
  }
  if (h !== c.hour) {
    c.hour = h;
    c.minute = c.second = 0;
  }
  const mi = p.minutes[c.minute]!;
  if (mi === -1) {
    c.hour++;
    c.minute = c.second = 0;
    return false;
  }
  if (mi !== c.minute) {
    c.minute = mi;
    c.second = 0;
  }
  const s = p.seconds[c.second]!;
  if (s === -1) {
    c.minute++;
    c.second = 0;
    return false;
  }
  c.second = s;
  return true;
}
