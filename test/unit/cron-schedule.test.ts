import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CronSchedule } from '../../src/cron/cron-schedule.js';
import { InvalidConfigError, InvalidScheduleError } from '../../src/errors.js';

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
/** The first n fire times strictly after fromIso. */
const after = (expr: string, tz: string, fromIso: string, n: number) =>
  CronSchedule.parse(expr, tz)
    .between(Date.parse(fromIso), Date.parse(fromIso) + 400 * 24 * 3600 * 1000, n)
    .map((t) => iso(t));
const next = (expr: string, tz: string, fromIso: string) =>
  iso(CronSchedule.parse(expr, tz).nextAfter(Date.parse(fromIso)));
const refusal = (setting: string, pattern: RegExp) => (e: unknown) =>
  e instanceof InvalidConfigError &&
  e.setting === setting &&
  pattern.test(e.message) &&
  (setting !== 'schedule' || e instanceof InvalidScheduleError);

describe('CronSchedule: expressions', () => {
  it('5-field, 6-field and nickname expressions', () => {
    assert.deepEqual(after('*/5 * * * *', 'UTC', '2026-01-01T00:00:00Z', 2), [
      '2026-01-01T00:05:00.000Z',
      '2026-01-01T00:10:00.000Z',
    ]);
    assert.deepEqual(after('*/20 * * * * *', 'UTC', '2026-01-01T00:00:00Z', 3), [
      '2026-01-01T00:00:20.000Z',
      '2026-01-01T00:00:40.000Z',
      '2026-01-01T00:01:00.000Z',
    ]);
    assert.equal(next('0 12 * * 1', 'UTC', '2026-01-01T00:00:00Z'), '2026-01-05T12:00:00.000Z'); // a Monday
    assert.equal(next('0 0 1 JAN *', 'UTC', '2026-01-01T00:00:00Z'), '2027-01-01T00:00:00.000Z');
    assert.equal(next('@hourly', 'UTC', '2026-01-01T00:00:00Z'), '2026-01-01T01:00:00.000Z');
    assert.equal(next('@daily', 'UTC', '2026-01-01T00:00:00Z'), '2026-01-02T00:00:00.000Z');
    assert.equal(next('@weekly', 'UTC', '2026-01-01T00:00:00Z'), '2026-01-04T00:00:00.000Z'); // Sunday
    assert.equal(next('@monthly', 'UTC', '2026-01-15T00:00:00Z'), '2026-02-01T00:00:00.000Z');
    assert.equal(next('0 0 29 2 *', 'UTC', '2026-01-01T00:00:00Z'), '2028-02-29T00:00:00.000Z');
  });

  it('nextAfter is strictly after the given instant; between is (from, to] and honours the limit', () => {
    const s = CronSchedule.parse('* * * * * *');
    const t = Date.parse('2026-01-01T00:00:05Z');
    assert.equal(s.nextAfter(t), t + 1000);
    assert.equal(s.nextAfter(t - 1), t);
    assert.deepEqual(s.between(t, t + 3000), [t + 1000, t + 2000, t + 3000]);
    assert.deepEqual(s.between(t, t + 10_000, 2), [t + 1000, t + 2000]);
    assert.deepEqual(s.between(t, t + 999), []);
    assert.equal(s.expression, '* * * * * *');
    assert.equal(s.timezone, 'UTC');
  });

  it('reads the schedule in its time zone, including half-hour offsets', () => {
    assert.equal(next('0 9 * * *', 'Asia/Kolkata', '2026-01-01T00:00:00Z'), '2026-01-01T03:30:00.000Z'); // +05:30
    assert.equal(next('30 23 * * *', 'Asia/Kolkata', '2026-01-01T00:00:00Z'), '2026-01-01T18:00:00.000Z');
    assert.equal(next('0 9 * * *', 'America/New_York', '2026-07-01T00:00:00Z'), '2026-07-01T13:00:00.000Z'); // EDT
    assert.equal(next('0 9 * * *', 'America/New_York', '2026-01-01T00:00:00Z'), '2026-01-01T14:00:00.000Z'); // EST
    assert.equal(next('0 9 * * *', 'Europe/Berlin', '2026-07-01T00:00:00Z'), '2026-07-01T07:00:00.000Z'); // CEST
    assert.equal(next('0 9 * * *', 'Europe/Berlin', '2026-01-01T00:00:00Z'), '2026-01-01T08:00:00.000Z'); // CET
    // Local midnight on a day boundary that differs from UTC's.
    assert.equal(next('0 0 * * 1', 'Asia/Kolkata', '2026-01-04T00:00:00Z'), '2026-01-04T18:30:00.000Z'); // Mon 00:00 IST
  });

  it('refuses a bad expression or an unknown time zone with a message naming the field', () => {
    assert.throws(
      () => CronSchedule.parse('61 * * * *'),
      refusal('schedule', /"61 \* \* \* \*": minute: 61 is out of range 0-59/),
    );
    assert.throws(() => CronSchedule.parse('hello'), refusal('schedule', /expected 5 or 6 fields but got 1/));
    assert.throws(() => CronSchedule.parse('* * * * * * *'), refusal('schedule', /expected 5 or 6 fields but got 7/));
    assert.throws(
      () => CronSchedule.parse('0 0 31 2 *'),
      refusal('schedule', /no date matches day-of-month "31" in month "2", so it would never fire/),
    );
    assert.throws(() => CronSchedule.parse('? * * * *'), refusal('schedule', /"\?" is not supported/));
    assert.throws(() => CronSchedule.parse(''), refusal('schedule', /must be a cron expression/));
    assert.throws(
      () => CronSchedule.parse('* * * * *', 'Mars/Base'),
      refusal('timezone', /^timezone: unknown time zone "Mars\/Base"/),
    );
    assert.throws(() => CronSchedule.parse('* * * * *', ''), refusal('timezone', /unknown time zone ""/));
  });
});

describe('CronSchedule: spring forward (the skipped hour)', () => {
  // America/New_York 2026-03-08: 02:00 EST (07:00Z) jumps to 03:00 EDT. Europe/Berlin 2026-03-29:
  // 02:00 CET (01:00Z) jumps to 03:00 CEST.
  it('a fixed time inside the gap fires once that day, at the first instant after the gap', () => {
    assert.deepEqual(after('30 2 * * *', 'America/New_York', '2026-03-07T12:00:00Z', 3), [
      '2026-03-08T07:00:00.000Z', // 03:00 EDT
      '2026-03-09T06:30:00.000Z', // 02:30 EDT
      '2026-03-10T06:30:00.000Z',
    ]);
    assert.deepEqual(after('30 2 * * *', 'Europe/Berlin', '2026-03-28T12:00:00Z', 2), [
      '2026-03-29T01:00:00.000Z', // 03:00 CEST
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
    ]);
    // Asked from the made-up fire itself, the next is the next day's.
    assert.equal(next('30 2 * * *', 'America/New_York', '2026-03-08T07:00:00Z'), '2026-03-09T06:30:00.000Z');
  });

  it('several gap times and a real 03:00 fire merge into one fire', () => {
    assert.deepEqual(after('0,30 2,3 * * *', 'America/New_York', '2026-03-08T05:00:00Z', 3), [
      '2026-03-08T07:00:00.000Z', // 02:00, 02:30 and 03:00 as one
      '2026-03-08T07:30:00.000Z', // 03:30 EDT
      '2026-03-09T06:00:00.000Z', // 02:00 EDT next day
    ]);
  });

  it('a schedule that fires every hour has no fires in the gap and makes none up', () => {
    assert.deepEqual(after('*/15 * * * *', 'America/New_York', '2026-03-08T06:40:00Z', 3), [
      '2026-03-08T06:45:00.000Z', // 01:45 EST
      '2026-03-08T07:00:00.000Z', // 03:00 EDT
      '2026-03-08T07:15:00.000Z',
    ]);
    assert.deepEqual(after('5 * * * *', 'America/New_York', '2026-03-08T06:00:00Z', 2), [
      '2026-03-08T06:05:00.000Z', // 01:05 EST
      '2026-03-08T07:05:00.000Z', // 03:05 EDT, no extra fire at 03:00
    ]);
    assert.deepEqual(after('10,40 * * * *', 'Europe/Berlin', '2026-03-29T00:30:00Z', 2), [
      '2026-03-29T00:40:00.000Z', // 01:40 CET
      '2026-03-29T01:10:00.000Z', // 03:10 CEST
    ]);
    // Every second: the last second before the gap, then the first after it.
    assert.deepEqual(after('* * * * * *', 'America/New_York', '2026-03-08T06:59:58Z', 2), [
      '2026-03-08T06:59:59.000Z',
      '2026-03-08T07:00:00.000Z',
    ]);
  });
});

describe('CronSchedule: fall back (the repeated hour)', () => {
  // America/New_York 2026-11-01: 02:00 EDT (06:00Z) goes back to 01:00 EST; 01:00-01:59 happen
  // twice. Europe/Berlin 2026-10-25: 03:00 CEST (01:00Z) goes back to 02:00 CET.
  it('a fixed time in the repeated hour fires once, at its first occurrence', () => {
    assert.deepEqual(after('30 1 * * *', 'America/New_York', '2026-10-31T12:00:00Z', 2), [
      '2026-11-01T05:30:00.000Z', // 01:30 EDT
      '2026-11-02T06:30:00.000Z', // 01:30 EST next day
    ]);
    assert.deepEqual(after('30 2 * * *', 'Europe/Berlin', '2026-10-24T12:00:00Z', 2), [
      '2026-10-25T00:30:00.000Z', // 02:30 CEST (croner alone gives 01:30Z, the second occurrence)
      '2026-10-26T01:30:00.000Z', // 02:30 CET next day
    ]);
  });

  it('asked from inside the second pass, it does not fire that wall time again', () => {
    // 06:10Z is 01:10 EST, the second 01:10.
    assert.equal(next('30 1 * * *', 'America/New_York', '2026-11-01T06:10:00Z'), '2026-11-02T06:30:00.000Z');
    assert.equal(next('* * * * * *', 'America/New_York', '2026-11-01T06:10:00Z'), '2026-11-01T07:00:00.000Z'); // 02:00 EST
    assert.equal(next('*/15 * * * *', 'America/New_York', '2026-11-01T05:59:59Z'), '2026-11-01T07:00:00.000Z');
  });

  it('an interval schedule does not fire twice for the same wall time', () => {
    assert.deepEqual(after('*/15 * * * *', 'America/New_York', '2026-11-01T04:50:00Z', 6), [
      '2026-11-01T05:00:00.000Z', // 01:00 EDT
      '2026-11-01T05:15:00.000Z',
      '2026-11-01T05:30:00.000Z',
      '2026-11-01T05:45:00.000Z', // 01:45 EDT; 01:00-01:45 EST do not fire again
      '2026-11-01T07:00:00.000Z', // 02:00 EST
      '2026-11-01T07:15:00.000Z',
    ]);
    assert.deepEqual(after('*/30 2 * * *', 'Europe/Berlin', '2026-10-24T12:00:00Z', 3), [
      '2026-10-25T00:00:00.000Z', // 02:00 CEST
      '2026-10-25T00:30:00.000Z', // 02:30 CEST; the CET pass does not fire
      '2026-10-26T01:00:00.000Z', // 02:00 CET next day
    ]);
  });
});

// Issue 12, "The cron clock must be right, or refuse": each reproduction of a misread or lost fire.
describe('CronSchedule: the dialect (issue 12)', () => {
  it('<weekday>L is the last such weekday of the month, not every one', () => {
    // croner 9.1.0 read 5L as 5: every Friday. 2026-01: Fridays 2, 9, 16, 23, 30.
    assert.deepEqual(after('0 0 * * 5L', 'UTC', '2026-01-01T00:00:00Z', 3), [
      '2026-01-30T00:00:00.000Z',
      '2026-02-27T00:00:00.000Z',
      '2026-03-27T00:00:00.000Z',
    ]);
    assert.deepEqual(after('0 0 * * FRIL', 'UTC', '2026-01-01T00:00:00Z', 1), ['2026-01-30T00:00:00.000Z']);
    // 1L: the last Monday (2026-01-26), not the 1st and the last day of the month.
    assert.deepEqual(after('0 0 * * 1L', 'UTC', '2026-01-01T00:00:00Z', 2), [
      '2026-01-26T00:00:00.000Z',
      '2026-02-23T00:00:00.000Z',
    ]);
    assert.deepEqual(after('0 0 L * *', 'UTC', '2028-02-01T00:00:00Z', 2), [
      '2028-02-29T00:00:00.000Z',
      '2028-03-31T00:00:00.000Z',
    ]);
    // A range of "last" weekdays is not in the dialect: refused rather than read as 1-5.
    assert.throws(
      () => CronSchedule.parse('0 0 * * 1-5L'),
      refusal('schedule', /day-of-week: "5L" is not a number 0-7.*"L" is supported only/),
    );
    assert.throws(() => CronSchedule.parse('0 0 * * L'), refusal('schedule', /day-of-week: "L" is not/));
    assert.throws(
      () => CronSchedule.parse('0 0 15W * *'),
      refusal('schedule', /"W" \(nearest weekday\) is not supported/),
    );
  });

  it('weekday#n next to a day-of-month list loses no fire', () => {
    // croner 9.1.0 gave 2024-03-08, skipping Friday 2024-03-01 (the 1st).
    assert.equal(next('0 0 1,31 * 5#2', 'UTC', '2024-02-27T00:00:00Z'), '2024-03-01T00:00:00.000Z');
    assert.equal(next('0 0 1,31 * 1#1', 'UTC', '2025-02-27T00:00:00Z'), '2025-03-01T00:00:00.000Z');
    assert.equal(next('0 0 1,30 * 5#2', 'UTC', '2025-02-27T00:00:00Z'), '2025-03-01T00:00:00.000Z');
    assert.deepEqual(after('0 0 * * 5#2', 'UTC', '2024-02-27T00:00:00Z', 2), [
      '2024-03-08T00:00:00.000Z',
      '2024-04-12T00:00:00.000Z',
    ]);
    assert.throws(
      () => CronSchedule.parse('0 0 * * 5#6'),
      refusal('schedule', /"5#6": the n in "weekday#n" must be 1 to 5/),
    );
  });

  it('day-of-month and day-of-week: OR when both are restricted, AND when either starts with "*" (Vixie)', () => {
    // */2 starts with "*": Mondays on an odd day of the month (2026-01-05 is a Monday, 01-12 is even).
    assert.deepEqual(after('0 0 */2 * 1', 'UTC', '2026-01-01T00:00:00Z', 3), [
      '2026-01-05T00:00:00.000Z',
      '2026-01-19T00:00:00.000Z',
      '2026-02-09T00:00:00.000Z',
    ]);
    // */3 in day-of-week is Sunday, Wednesday, Saturday: the 1st when it is one of those.
    assert.deepEqual(after('0 0 1 * */3', 'UTC', '2026-01-01T00:00:00Z', 3), [
      '2026-02-01T00:00:00.000Z',
      '2026-03-01T00:00:00.000Z',
      '2026-04-01T00:00:00.000Z',
    ]);
    // Both restricted: the 1st or a Monday. 0 0 31 2 1 fires on February's Mondays.
    assert.deepEqual(after('0 0 1 * 1', 'UTC', '2026-01-27T00:00:00Z', 2), [
      '2026-02-01T00:00:00.000Z',
      '2026-02-02T00:00:00.000Z',
    ]);
    assert.deepEqual(after('0 0 31 2 1', 'UTC', '2026-01-01T00:00:00Z', 2), [
      '2026-02-02T00:00:00.000Z',
      '2026-02-09T00:00:00.000Z',
    ]);
    // 7 is Sunday too.
    assert.equal(next('0 0 * * 7', 'UTC', '2026-01-01T00:00:00Z'), '2026-01-04T00:00:00.000Z');
  });

  it('@midnight and the other nicknames are read; /5, N/step and 7 fields are refused', () => {
    assert.equal(next('@midnight', 'UTC', '2026-01-01T10:00:00Z'), '2026-01-02T00:00:00.000Z');
    assert.equal(next('@annually', 'UTC', '2026-01-01T10:00:00Z'), '2027-01-01T00:00:00.000Z');
    assert.equal(next('@YEARLY', 'UTC', '2026-01-01T10:00:00Z'), '2027-01-01T00:00:00.000Z');
    assert.throws(() => CronSchedule.parse('@reboot'), refusal('schedule', /unknown nickname; use one of @yearly/));
    assert.throws(
      () => CronSchedule.parse('/5 * * * *'),
      refusal('schedule', /minute: "\/5": a step needs "\*" or a range before it/),
    );
    assert.throws(() => CronSchedule.parse('5/15 * * * *'), refusal('schedule', /minute: "5\/15": a step needs/));
    assert.throws(
      () => CronSchedule.parse('*/0 * * * *'),
      refusal('schedule', /minute: step "0" must be a whole number from 1 to 60/),
    );
    assert.throws(
      () => CronSchedule.parse('0 0 * * fri-mon'),
      refusal('schedule', /day-of-week: the range "fri-mon" goes backwards/),
    );
    assert.throws(
      () => CronSchedule.parse('0 0 * * monday'),
      refusal('schedule', /day-of-week: "monday" is not a number 0-7 or a name/),
    );
    // */20 is the 1st and 21st; the second Friday is the 8th-14th: never both.
    assert.throws(
      () => CronSchedule.parse('0 0 */20 * 5#2'),
      refusal('schedule', /day-of-month "\*\/20" in month "\*" and day-of-week "5#2", so it would never fire/),
    );
    assert.equal(next('0 0 */30 2 */7', 'UTC', '2026-01-01T00:00:00Z'), '2026-02-01T00:00:00.000Z'); // 1 Feb 2026 is a Sunday
  });
});

describe('defineJob: a schedule outside the dialect', () => {
  it('is refused with an InvalidScheduleError naming the job', async () => {
    const { defineJob } = await import('../../src/jobs/define-job.js');
    assert.throws(
      () => defineJob({ name: 'report', schedule: '0 0 * * 1-5L', handler: () => {} }),
      (e: unknown) =>
        e instanceof InvalidScheduleError &&
        e.setting === 'job "report": schedule' &&
        e.expression === '0 0 * * 1-5L' &&
        /^job "report": schedule: invalid cron expression "0 0 \* \* 1-5L": day-of-week: /.test(e.message),
    );
  });
});
