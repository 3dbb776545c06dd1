/**
 * Issue 16, DST per job: dstRepeat ('first' | 'last' | 'both') for a wall-clock time a fall-back
 * repeats and dstGap ('shift' | 'skip') for one a spring-forward skips, in Europe/Berlin,
 * America/New_York, Australia/Lord_Howe (a 30-minute change) and America/Mexico_City (DST
 * abolished after October 2022), plus the preview that `cronwarden next` prints.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CronSchedule, type DstPolicy } from '../../src/cron/cron-schedule.js';
import { previewFires } from '../../src/cron/schedule-preview.js';
import { InvalidConfigError } from '../../src/errors.js';
import { runDifferential } from '../support/cron-differential.js';

/** Local times (with offset) of the first n fires after fromIso. */
function local(expr: string, zone: string, fromIso: string, n: number, dst: Partial<DstPolicy> = {}): string[] {
  return previewFires(CronSchedule.parse(expr, zone, dst), Date.parse(fromIso), n).map((e) => e.local);
}

describe('dstRepeat: a wall-clock time the fall-back repeats', () => {
  it('Europe/Berlin 02:30 on 2026-10-25: first (default), last, both', () => {
    const from = '2026-10-24T12:00:00Z';
    assert.deepEqual(local('30 2 * * *', 'Europe/Berlin', from, 2), [
      '2026-10-25T02:30:00+02:00',
      '2026-10-26T02:30:00+01:00',
    ]);
    assert.deepEqual(local('30 2 * * *', 'Europe/Berlin', from, 2, { repeat: 'last' }), [
      '2026-10-25T02:30:00+01:00',
      '2026-10-26T02:30:00+01:00',
    ]);
    assert.deepEqual(local('30 2 * * *', 'Europe/Berlin', from, 3, { repeat: 'both' }), [
      '2026-10-25T02:30:00+02:00',
      '2026-10-25T02:30:00+01:00',
      '2026-10-26T02:30:00+01:00',
    ]);
  });

  it('America/New_York */20 through the repeated 01:00 hour, asked from inside each pass', () => {
    const expr = '*/20 1 * * *';
    const firstPass = '2026-11-01T05:10:00Z'; // 01:10 EDT
    const secondPass = '2026-11-01T06:10:00Z'; // 01:10 EST
    assert.deepEqual(local(expr, 'America/New_York', firstPass, 3), [
      '2026-11-01T01:20:00-04:00',
      '2026-11-01T01:40:00-04:00',
      '2026-11-02T01:00:00-05:00',
    ]);
    assert.deepEqual(local(expr, 'America/New_York', secondPass, 1), ['2026-11-02T01:00:00-05:00']);
    // 'last' asked inside the first pass: the second pass's 01:00 comes first, then 01:20, 01:40.
    assert.deepEqual(local(expr, 'America/New_York', firstPass, 3, { repeat: 'last' }), [
      '2026-11-01T01:00:00-05:00',
      '2026-11-01T01:20:00-05:00',
      '2026-11-01T01:40:00-05:00',
    ]);
    assert.deepEqual(local(expr, 'America/New_York', firstPass, 5, { repeat: 'both' }), [
      '2026-11-01T01:20:00-04:00',
      '2026-11-01T01:40:00-04:00',
      '2026-11-01T01:00:00-05:00',
      '2026-11-01T01:20:00-05:00',
      '2026-11-01T01:40:00-05:00',
    ]);
    assert.deepEqual(local(expr, 'America/New_York', secondPass, 2, { repeat: 'both' }), [
      '2026-11-01T01:20:00-05:00',
      '2026-11-01T01:40:00-05:00',
    ]);
  });

  it('Australia/Lord_Howe repeats half an hour (01:30-02:00 at +11:00, then at +10:30)', () => {
    const from = '2026-04-04T12:00:00Z';
    const expr = '*/15 1 * * *';
    assert.deepEqual(local(expr, 'Australia/Lord_Howe', from, 4), [
      '2026-04-05T01:00:00+11:00',
      '2026-04-05T01:15:00+11:00',
      '2026-04-05T01:30:00+11:00',
      '2026-04-05T01:45:00+11:00',
    ]);
    assert.deepEqual(local(expr, 'Australia/Lord_Howe', from, 5, { repeat: 'last' }).slice(2), [
      '2026-04-05T01:30:00+10:30',
      '2026-04-05T01:45:00+10:30',
      '2026-04-06T01:00:00+10:30',
    ]);
    assert.deepEqual(local(expr, 'Australia/Lord_Howe', from, 6, { repeat: 'both' }).slice(2), [
      '2026-04-05T01:30:00+11:00',
      '2026-04-05T01:45:00+11:00',
      '2026-04-05T01:30:00+10:30',
      '2026-04-05T01:45:00+10:30',
    ]);
  });
});

describe('dstGap: a wall-clock time the spring-forward skips', () => {
  it('Europe/Berlin 02:30 on 2026-03-29: shift (default) fires at 03:00, skip does not fire that day', () => {
    const from = '2026-03-28T12:00:00Z';
    assert.deepEqual(local('30 2 * * *', 'Europe/Berlin', from, 2), [
      '2026-03-29T03:00:00+02:00',
      '2026-03-30T02:30:00+02:00',
    ]);
    assert.deepEqual(local('30 2 * * *', 'Europe/Berlin', from, 2, { gap: 'skip' }), [
      '2026-03-30T02:30:00+02:00',
      '2026-03-31T02:30:00+02:00',
    ]);
    // 02:00 and 02:30 do not exist: shifted, they merge with the schedule's own 03:00 into one fire.
    for (const gap of ['shift', 'skip'] as const)
      assert.deepEqual(local('0,30 2,3 * * *', 'Europe/Berlin', from, 2, { gap }), [
        '2026-03-29T03:00:00+02:00',
        '2026-03-29T03:30:00+02:00',
      ]);
  });

  it('America/New_York and Australia/Lord_Howe (a 30-minute gap)', () => {
    assert.deepEqual(local('15 2 * * *', 'America/New_York', '2026-03-08T00:00:00Z', 1), ['2026-03-08T03:00:00-04:00']);
    assert.deepEqual(local('15 2 * * *', 'America/New_York', '2026-03-08T00:00:00Z', 1, { gap: 'skip' }), [
      '2026-03-09T02:15:00-04:00',
    ]);
    assert.deepEqual(local('15 2 * * *', 'Australia/Lord_Howe', '2026-10-03T12:00:00Z', 1), [
      '2026-10-04T02:30:00+11:00',
    ]);
    assert.deepEqual(local('15 2 * * *', 'Australia/Lord_Howe', '2026-10-03T12:00:00Z', 1, { gap: 'skip' }), [
      '2026-10-05T02:15:00+11:00',
    ]);
  });
});

describe('a zone that changed its rules: America/Mexico_City abolished DST after 2022-10-30', () => {
  it('the last fall-back follows dstRepeat; the spring of 2023 has no gap and no DST day', () => {
    const from = '2022-10-29T12:00:00Z';
    assert.deepEqual(local('30 1 * * *', 'America/Mexico_City', from, 1), ['2022-10-30T01:30:00-05:00']);
    assert.deepEqual(local('30 1 * * *', 'America/Mexico_City', from, 1, { repeat: 'last' }), [
      '2022-10-30T01:30:00-06:00',
    ]);
    assert.equal(
      local('30 1 * * *', 'America/Mexico_City', from, 3, { repeat: 'both' })[1],
      '2022-10-30T01:30:00-06:00',
    );
    for (const gap of ['shift', 'skip'] as const) {
      const p = previewFires(
        CronSchedule.parse('30 2 * * *', 'America/Mexico_City', { gap }),
        Date.parse('2023-04-01T12:00:00Z'),
        2,
      );
      assert.deepEqual(
        p.map((e) => [e.local, e.dstDay, e.dst]),
        [
          ['2023-04-02T02:30:00-06:00', false, null],
          ['2023-04-03T02:30:00-06:00', false, null],
        ],
      );
    }
  });
});

describe('preview', () => {
  it('lists instants with offsets, marks DST days and what the policy did', () => {
    const p = previewFires(CronSchedule.parse('30 2 * * *', 'Europe/Berlin'), Date.parse('2026-03-27T12:00:00Z'), 3);
    assert.deepEqual(p, [
      {
        at: '2026-03-28T01:30:00.000Z',
        local: '2026-03-28T02:30:00+01:00',
        offset: '+01:00',
        dstDay: false,
        dst: null,
      },
      {
        at: '2026-03-29T01:00:00.000Z',
        local: '2026-03-29T03:00:00+02:00',
        offset: '+02:00',
        dstDay: true,
        dst: 'gap-shifted',
      },
      {
        at: '2026-03-30T00:30:00.000Z',
        local: '2026-03-30T02:30:00+02:00',
        offset: '+02:00',
        dstDay: false,
        dst: null,
      },
    ]);
    const fall = previewFires(
      CronSchedule.parse('30 1 * * *', 'America/New_York', { repeat: 'both' }),
      Date.parse('2026-11-01T00:00:00Z'),
      2,
    );
    assert.deepEqual(
      fall.map((e) => [e.offset, e.dstDay, e.dst]),
      [
        ['-04:00', true, 'repeated-first'],
        ['-05:00', true, 'repeated-second'],
      ],
    );
    assert.deepEqual(previewFires(CronSchedule.parse('0 0 * * *'), 0, 1)[0]!.offset, '+00:00');
  });

  it('refuses an unknown policy with the setting named', () => {
    assert.throws(
      () => CronSchedule.parse('* * * * *', 'UTC', { repeat: 'twice' as never }),
      (e) => e instanceof InvalidConfigError && e.setting === 'dstRepeat' && /first, last, both/.test(e.message),
    );
    assert.throws(
      () => CronSchedule.parse('* * * * *', 'UTC', { gap: 'later' as never }),
      (e) => e instanceof InvalidConfigError && e.setting === 'dstGap',
    );
  });
});

describe('every policy against the brute-force oracle', () => {
  for (const repeat of ['first', 'last', 'both'] as const)
    for (const gap of ['shift', 'skip'] as const)
      it(`dstRepeat ${repeat}, dstGap ${gap}: 300 random expressions in five zones around DST changes`, () => {
        const r = runDifferential(300, 16_000 + repeat.length * 10 + gap.length, { repeat, gap });
        assert.deepEqual(r.mismatches, []);
        assert.ok(r.firesCompared > 3000, `only ${r.firesCompared} fires compared`);
      });
});
