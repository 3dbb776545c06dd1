import { it } from 'node:test';
import assert from 'node:assert/strict';
import { describeSchedule } from '../../src/cron/describe-schedule.js';
import { zoned } from '../../src/admin/zoned-time.js';

it('describes the common schedule shapes in words, and anything else field by field', () => {
  const cases: [string, string][] = [
    ['*/10 * * * * *', 'every 10 seconds'],
    ['* * * * *', 'every minute'],
    ['*/5 * * * *', 'every 5 minutes'],
    ['0 * * * *', 'every hour'],
    ['15 */2 * * *', 'every 2 hours at minute 15'],
    ['30 1 * * *', 'at 01:30 every day'],
    ['0 30 1 * * *', 'at 01:30 every day'],
    ['0 9 * * 1-5', 'at 09:00 on weekdays'],
    ['0 9 * * 0', 'at 09:00 every Sunday'],
    ['0 0 15 * *', 'at 00:00 on day 15 of every month'],
    ['0 0 1 1 *', 'at 00:00 every year on January 1'],
    ['1,2 3 * * *', 'at minute 1,2, hour 3, day of month *, month *, weekday *'],
    ['@hourly', 'cron @hourly'],
  ];
  for (const [expr, words] of cases) assert.equal(describeSchedule(expr), words, expr);
});

it('shows an instant in a zone with the offset of that instant (DST and half-hour zones)', () => {
  assert.deepEqual(zoned(Date.parse('2026-12-31T23:00:00Z'), 'Europe/Berlin'), {
    at: '2026-12-31T23:00:00.000Z',
    local: '2027-01-01 00:00:00',
    offset: '+01:00',
  });
  assert.equal(zoned(Date.parse('2026-07-01T12:00:00Z'), 'Europe/Berlin').offset, '+02:00');
  assert.equal(zoned(Date.parse('2026-07-01T00:00:00Z'), 'America/St_Johns').local, '2026-06-30 21:30:00');
  assert.equal(zoned(Date.parse('2026-07-01T00:00:00Z'), 'UTC').offset, '+00:00');
});
