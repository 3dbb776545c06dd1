import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CronSchedule } from '../../src/scheduler/cron-schedule.js';
import { InvalidConfigError } from '../../src/errors.js';

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
/** The first n fire times strictly after fromIso. */
const after = (expr: string, tz: string, fromIso: string, n: number) =>
  CronSchedule.parse(expr, tz)
    .between(Date.parse(fromIso), Date.parse(fromIso) + 400 * 24 * 3600 * 1000, n)
    .map((t) => iso(t));
const next = (expr: string, tz: string, fromIso: string) => iso(CronSchedule.parse(expr, tz).nextAfter(Date.parse(fromIso)));
const refusal = (setting: string, pattern: RegExp) => (e: unknown) =>
  e instanceof InvalidConfigError && e.setting === setting && pattern.test(e.message);

describe('CronSchedule: expressions', () => {
  it('5-field, 6-field and nickname expressions', () => {
    assert.deepEqual(after('*/5 * * * *', 'UTC', '2026-01-01T00:00:00Z', 2), ['2026-01-01T00:05:00.000Z', '2026-01-01T00:10:00.000Z']);
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
    assert.throws(() => CronSchedule.parse('61 * * * *'), refusal('schedule', /"61 \* \* \* \*": minute: 61 is a invalid expression/));
    assert.throws(() => CronSchedule.parse('hello'), refusal('schedule', /expected 5 or 6 fields but got 1/));
    assert.throws(() => CronSchedule.parse('* * * * * * *'), refusal('schedule', /expected 5 or 6 fields but got 7/));
    assert.throws(() => CronSchedule.parse('0 0 31 2 *'), refusal('schedule', /dayOfMonth: .*impossible/));
    assert.throws(() => CronSchedule.parse('? * * * *'), refusal('schedule', /"\?" is not supported/));
    assert.throws(() => CronSchedule.parse(''), refusal('schedule', /must be a cron expression/));
    assert.throws(() => CronSchedule.parse('* * * * *', 'Mars/Base'), refusal('timezone', /^timezone: unknown time zone "Mars\/Base"/));
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
    assert.deepEqual(after('* * * * * *', 'America/New_York', '2026-03-08T06:59:58Z', 2), ['2026-03-08T06:59:59.000Z', '2026-03-08T07:00:00.000Z']);
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
