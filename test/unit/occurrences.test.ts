import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CronSchedule } from '../../src/cron/cron-schedule.js';
import { COALESCED, pauseReason, queueFullReason } from '../../src/cron/job-policies.js';
import { lastAtOrBefore, missedRanges } from '../../src/cron/missed-ranges.js';
import { planCatchUp, type CatchUpInput } from '../../src/cron/misfire.js';
import { classifySkip } from '../../src/cron/occurrence-reasons.js';
import { occurrenceText } from '../../src/cron/occurrence-text.js';
import { occurrenceTimeline, type TimelineInput, type TimelineRun } from '../../src/cron/occurrence-timeline.js';
import { STOPPED, scheduleOf } from '../../src/cron/schedule-era.js';
import { defineJob } from '../../src/jobs/define-job.js';
import { eraAtTenureStart } from '../../src/scheduler/firing/occurrence-accounting.js';

const T0 = Date.UTC(2026, 0, 1);
const S = 1000;
const DAY = 86_400 * S;
const everySecond = CronSchedule.parse('* * * * * *');

describe('skip reasons', () => {
  it('classifies every text the policies write into the fixed set', () => {
    assert.equal(classifySkip(pauseReason({ reason: 'deploy', by: 'admin (ann)', until: new Date(T0) })), 'paused');
    assert.equal(classifySkip(pauseReason({ reason: null, by: null, until: null })), 'paused');
    assert.equal(classifySkip('overlap "skip": previous run still active'), 'overlap-skip');
    assert.equal(classifySkip(queueFullReason(2)), 'queue-full');
    assert.equal(classifySkip(COALESCED), 'coalesced');
    assert.equal(classifySkip('overlap "coalesce": run 42 stands for it'), 'coalesced');
    assert.equal(classifySkip('something else'), 'other');
    assert.equal(classifySkip(null), 'other');
  });
});

describe('missed ranges of a catch-up plan', () => {
  const input = (o: Partial<CatchUpInput>): CatchUpInput => ({
    schedule: everySecond,
    policy: 'all',
    lastFiredMs: T0,
    nowMs: T0 + DAY,
    catchUpWindowMs: 60 * S,
    misfireGraceMs: S,
    ...o,
  });
  const rangesOf = (o: Partial<CatchUpInput>) => {
    const i = input(o);
    const plan = planCatchUp(i);
    return { plan, ranges: missedRanges(i, plan) };
  };

  it('a day of a per-second job past its window is ONE range, counted exactly, ending where the window begins', () => {
    const { plan, ranges } = rangesOf({});
    assert.equal(ranges.length, 1);
    const [r] = ranges;
    assert.equal(r!.reason, 'catch-up-window');
    assert.equal(r!.firstMs, T0 + S);
    assert.equal(r!.lastMs, plan.fire[0]! - S, 'the range ends just before the first fire');
    assert.equal(r!.exact, true);
    assert.equal(r!.count + plan.fire.length, 86_400, 'every due instant is fired or in the range');
  });

  it('maxCatchUp splits the late instants in reach into their own range', () => {
    const { plan, ranges } = rangesOf({ maxCatchUp: 5 });
    assert.deepEqual(
      ranges.map((r) => r.reason),
      ['catch-up-window', 'max-catch-up'],
    );
    const total = ranges.reduce((n, r) => n + r.count, 0) + plan.fire.length;
    assert.equal(total, 86_400);
    assert.equal(ranges[1]!.lastMs, plan.fire[0]! - S);
    assert.equal(ranges[0]!.lastMs + S, ranges[1]!.firstMs, 'the ranges meet');
  });

  it("misfire 'skip' misses every late instant for the policy; 'latest' for the window and then the policy", () => {
    const skip = rangesOf({ policy: 'skip' });
    assert.deepEqual(
      skip.ranges.map((r) => r.reason),
      ['misfire-policy'],
    );
    const latest = rangesOf({ policy: 'latest', nowMs: T0 + DAY + 500 });
    assert.deepEqual(
      latest.ranges.map((r) => r.reason),
      ['catch-up-window', 'misfire-policy'],
    );
    assert.equal(latest.ranges.reduce((n, r) => n + r.count, 0) + latest.plan.fire.length, 86_400);
  });

  it('past the counting budget the count is a lower bound and the last instant is still found', () => {
    const { ranges } = rangesOf({ nowMs: T0 + 3 * DAY });
    assert.equal(ranges.length, 1);
    assert.equal(ranges[0]!.exact, false);
    assert.ok(ranges[0]!.count >= 110_000 && ranges[0]!.count < 3 * 86_400);
    assert.equal(ranges[0]!.lastMs, T0 + 3 * DAY - 61 * S, 'the last instant older than the window');
  });

  it('nothing missed, no range; a job that never fired has none either', () => {
    assert.deepEqual(rangesOf({ nowMs: T0 + 30 * S }).ranges, []);
    assert.deepEqual(rangesOf({ lastFiredMs: null }).ranges, []);
  });

  it('lastAtOrBefore finds the last instant of sparse and dense schedules', () => {
    const yearly = CronSchedule.parse('0 0 1 1 *');
    assert.equal(lastAtOrBefore(yearly, Date.UTC(2027, 5, 1), Date.UTC(2020, 0, 1)), Date.UTC(2027, 0, 1));
    assert.equal(lastAtOrBefore(everySecond, T0 + 1500, T0), T0 + S);
    assert.equal(lastAtOrBefore(yearly, Date.UTC(2027, 5, 1), Date.UTC(2027, 0, 1)), undefined);
  });
});

describe('occurrence timeline', () => {
  const run = (s: number, state = 'completed', error: string | null = null, trigger = 'schedule'): TimelineRun => ({
    runId: String(s),
    atMs: T0 + s * S,
    state,
    trigger,
    error,
  });
  const base = (o: Partial<TimelineInput>): TimelineInput => ({
    fromMs: T0 + S,
    toMs: T0 + 300 * S,
    nowMs: T0 + 200 * S,
    eras: [{ fromMs: T0, toMs: null, schedule: everySecond, expression: '* * * * * *', timezone: 'UTC' }],
    runs: [],
    missed: [],
    watermarkMs: null,
    limit: 1000,
    ...o,
  });
  const summary = (input: TimelineInput) =>
    occurrenceTimeline(input).entries.map(
      (e) => `${e.outcome} ${(e.firstMs - T0) / S}-${(e.lastMs - T0) / S} x${e.count}`,
    );

  it('collapses runs of one answer, jumps over a missed range and the spans nobody accounted for yet', () => {
    const runs = [
      ...Array.from({ length: 5 }, (_, i) => run(i + 1)),
      ...Array.from({ length: 50 }, (_, i) => run(i + 101)).filter((r) => r.atMs !== T0 + 120 * S),
    ];
    const missed = [
      {
        firstMs: T0 + 6 * S,
        lastMs: T0 + 100 * S,
        count: 95,
        exact: true,
        reason: 'catch-up-window' as const,
        outageStartMs: T0 + 5 * S,
        outageEndMs: T0 + 160 * S,
        leaderToken: '7',
        leaderId: 'r2',
      },
    ];
    assert.deepEqual(summary(base({ runs, missed, watermarkMs: T0 + 150 * S })), [
      'fired 1-5 x5',
      'missed 6-100 x95',
      'fired 101-119 x19',
      'unanswered 120-120 x1',
      'fired 121-150 x30',
      'not-accounted 151-200 x50',
      'not-yet-due 201-300 x100',
    ]);
    const missedEntry = occurrenceTimeline(base({ runs, missed, watermarkMs: T0 + 150 * S })).entries[1]!;
    assert.match(
      occurrenceText(missedEntry),
      /outage from last handled .*00:00:05\.000Z until .*00:02:40\.000Z, decided by leader r2 \(token 7\)/,
    );
  });

  it('looks at no more than the limit one by one, and says where to go on from', () => {
    const runs = Array.from({ length: 50 }, (_, i) => run(i + 1));
    const t = occurrenceTimeline(base({ runs, watermarkMs: T0 + 50 * S, limit: 10 }));
    assert.equal(t.examined, 10);
    assert.equal(t.truncatedAfterMs, T0 + 10 * S);
    assert.deepEqual(
      t.entries.map((e) => e.count),
      [10],
    );
  });

  it('a large span with no runs costs one entry, not one look-up per instant', () => {
    const t = occurrenceTimeline(
      base({ fromMs: T0 + S, toMs: T0 + 2 * DAY, nowMs: T0 + DAY, watermarkMs: null, limit: 1 }),
    );
    assert.equal(t.examined, 0);
    assert.deepEqual(
      t.entries.map((e) => [e.outcome, e.count]),
      [
        ['not-accounted', 86_400],
        ['not-yet-due', 86_400],
      ],
    );
  });

  it('skips collapse by their text; pauses and overlap skips stay apart; before the first era is not accounted', () => {
    const paused = pauseReason({ reason: 'deploy', by: 'admin (ann)', until: null });
    const runs = [
      run(11, 'skipped', paused),
      run(12, 'skipped', paused),
      run(13, 'skipped', 'overlap "skip": previous run still active'),
      run(14, 'skipped', 'overlap "coalesce": run 3 stands for it'),
      run(15, 'skipped', 'overlap "coalesce": run 9 stands for it'),
    ];
    const t = occurrenceTimeline(
      base({
        fromMs: T0 + 6 * S,
        toMs: T0 + 15 * S,
        eras: [{ fromMs: T0 + 10 * S, toMs: null, schedule: everySecond, expression: '* * * * * *', timezone: 'UTC' }],
        runs,
        watermarkMs: T0 + 15 * S,
      }),
    );
    assert.deepEqual(
      t.entries.map((e) => [e.outcome, e.skip?.reason ?? e.notAccounted?.why, e.count]),
      [
        ['not-accounted', 'before-first-era', 5],
        ['skipped', 'paused', 2],
        ['skipped', 'overlap-skip', 1],
        ['skipped', 'coalesced', 2],
      ],
    );
    assert.match(occurrenceText(t.entries[1]!), /\[paused\]: job is paused by admin \(ann\): deploy/);
  });

  it('a schedule change: each era enumerates its own instants', () => {
    const everyTen = CronSchedule.parse('*/10 * * * * *');
    const t = occurrenceTimeline(
      base({
        fromMs: T0 + S,
        toMs: T0 + 60 * S,
        nowMs: T0 + 60 * S,
        eras: [
          { fromMs: T0, toMs: T0 + 5 * S, schedule: everySecond, expression: '* * * * * *', timezone: 'UTC' },
          { fromMs: T0 + 5 * S, toMs: null, schedule: everyTen, expression: '*/10 * * * * *', timezone: 'UTC' },
        ],
        runs: [1, 2, 3, 4, 5, 10, 20, 30, 40, 50, 60].map((s) => run(s)),
        watermarkMs: T0 + 60 * S,
      }),
    );
    assert.deepEqual(
      t.entries.map((e) => [e.outcome, e.count]),
      [['fired', 11]],
    );
  });
});

describe('DST: wall times the policy drops are listed as skipped for dst', () => {
  const utc = (iso: string) => Date.parse(iso);

  it("dstRepeat 'first' drops the repeated hour's second pass; 'both' drops nothing; 'last' the first pass", () => {
    const from = utc('2026-10-24T12:00:00Z');
    const to = utc('2026-10-25T12:00:00Z');
    const first = CronSchedule.parse('*/15 * * * *', 'Europe/Berlin');
    assert.deepEqual(
      first.dstDropped(from, to).map((t) => new Date(t).toISOString()),
      ['2026-10-25T01:00:00.000Z', '2026-10-25T01:15:00.000Z', '2026-10-25T01:30:00.000Z', '2026-10-25T01:45:00.000Z'],
    );
    assert.deepEqual(CronSchedule.parse('*/15 * * * *', 'Europe/Berlin', { repeat: 'both' }).dstDropped(from, to), []);
    assert.deepEqual(
      CronSchedule.parse('*/15 * * * *', 'Europe/Berlin', { repeat: 'last' })
        .dstDropped(from, to)
        .map((t) => new Date(t).toISOString()),
      ['2026-10-25T00:00:00.000Z', '2026-10-25T00:15:00.000Z', '2026-10-25T00:30:00.000Z', '2026-10-25T00:45:00.000Z'],
    );
    assert.deepEqual(CronSchedule.parse('*/15 * * * *').dstDropped(from, to), [], 'UTC has no DST');
  });

  it("a spring-forward gap: an every-hour pattern drops its gap times; dstGap 'shift' fires the first at the gap's end", () => {
    const from = utc('2026-03-28T12:00:00Z');
    const to = utc('2026-03-29T12:00:00Z');
    const at = utc('2026-03-29T01:00:00Z');
    assert.deepEqual(CronSchedule.parse('*/30 * * * *', 'Europe/Berlin').dstDropped(from, to), [at, at]);
    assert.deepEqual(CronSchedule.parse('*/30 2 * * *', 'Europe/Berlin').dstDropped(from, to), [at]);
    assert.deepEqual(CronSchedule.parse('*/30 2 * * *', 'Europe/Berlin', { gap: 'skip' }).dstDropped(from, to), [
      at,
      at,
    ]);
  });

  it('the timeline puts them in their place between the fired instants', () => {
    const schedule = CronSchedule.parse('*/15 * * * *', 'Europe/Berlin');
    const from = utc('2026-10-25T00:00:00Z');
    const to = utc('2026-10-25T02:00:00Z');
    const due = schedule.between(from - 1, to);
    assert.equal(due.length, 5);
    const t = occurrenceTimeline({
      fromMs: from,
      toMs: to,
      nowMs: to,
      eras: [{ fromMs: from - DAY, toMs: null, schedule, expression: '*/15 * * * *', timezone: 'Europe/Berlin' }],
      runs: due.map((at, i) => ({
        runId: String(i + 1),
        atMs: at,
        state: 'completed',
        trigger: 'schedule',
        error: null,
      })),
      missed: [],
      watermarkMs: to,
      limit: 100,
      dstDropped: schedule.dstDropped(from - 1, to),
    });
    assert.deepEqual(
      t.entries.map((e) => [e.outcome, e.skip?.reason, e.count]),
      [
        ['fired', undefined, 4],
        ['skipped', 'dst', 4],
        ['fired', undefined, 1],
      ],
    );
  });
});

describe('schedule eras at a tenure start', () => {
  const job = (schedule: string) => defineJob({ name: 'j', schedule, handler: () => {} });
  const era = (expression: string, from: number) => ({
    job: 'j',
    expression,
    timezone: 'UTC',
    dst: 'first/shift',
    from: new Date(from),
  });

  it('a new job opens an era from now and starts from now', () => {
    assert.deepEqual(eraAtTenureStart(job('* * * * * *'), undefined, null, T0), {
      open: era('* * * * * *', T0),
      planFrom: null,
    });
  });

  it('an unchanged schedule opens nothing; a job that never fired is due since its era began', () => {
    assert.deepEqual(eraAtTenureStart(job('* * * * * *'), era('* * * * * *', T0), null, T0 + DAY), {
      open: undefined,
      planFrom: T0,
    });
    assert.deepEqual(
      eraAtTenureStart(job('* * * * * *'), era('* * * * * *', T0), T0 + 5 * S, T0 + DAY).planFrom,
      T0 + 5 * S,
    );
  });

  it('a changed schedule opens an era at the last fire, and the catch-up goes on from there under it', () => {
    const r = eraAtTenureStart(job('*/10 * * * * *'), era('* * * * * *', T0), T0 + 4 * S, T0 + 9 * S);
    assert.deepEqual(r, { open: era('*/10 * * * * *', T0 + 4 * S), planFrom: T0 + 4 * S });
  });

  it('a stopped era enumerates nothing', () => {
    assert.equal(scheduleOf({ expression: STOPPED, timezone: 'UTC', dst: 'first/shift' }), null);
    assert.ok(scheduleOf({ expression: '*/5 * * * *', timezone: 'Europe/Berlin', dst: 'last/skip' }));
  });
});
