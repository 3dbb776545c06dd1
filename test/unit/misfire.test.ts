import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { planCatchUp } from '../../src/cron/misfire.js';
import { CronSchedule } from '../../src/cron/cron-schedule.js';

const everySecond = CronSchedule.parse('* * * * * *');
const T = Date.UTC(2026, 0, 1);
// Due: T+1s … T+10s; now is T+10.5s, so T+10s is 0.5 s late (within grace) and T+9s 1.5 s late.
const base = { schedule: everySecond, lastFiredMs: T, nowMs: T + 10_500, catchUpWindowMs: 5000, misfireGraceMs: 1000 };
const rel = (xs: number[]) => xs.map((x) => (x - T) / 1000);
const DAY = 24 * 3600_000;

describe('planCatchUp', () => {
  it('"all" fires every missed time inside the window, misses the older ones', () => {
    const plan = planCatchUp({ ...base, policy: 'all' });
    assert.deepEqual(rel(plan.fire), [6, 7, 8, 9, 10]);
    assert.deepEqual(rel(plan.missed), [1, 2, 3, 4, 5]);
    assert.equal(plan.missedCount, 5);
    assert.equal(plan.missedCountExact, true);
  });

  it('"latest" fires the newest inside the window only; a time within grace is on time and is that one', () => {
    const noGrace = planCatchUp({ ...base, policy: 'latest', misfireGraceMs: 0 });
    assert.deepEqual(rel(noGrace.fire), [10]);
    assert.deepEqual(rel(noGrace.missed), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const withGrace = planCatchUp({ ...base, policy: 'latest' });
    assert.deepEqual(rel(withGrace.fire), [10]);
    assert.equal(withGrace.missedCount, 9);
    // Nothing on time (T+10s is 0.5 s late, grace 0.4 s): the newest late one inside the window fires.
    const late = planCatchUp({ ...base, policy: 'latest', misfireGraceMs: 400 });
    assert.deepEqual(rel(late.fire), [10]);
    assert.deepEqual(rel(late.missed), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });

  it('"skip" fires only what is on time', () => {
    const plan = planCatchUp({ ...base, policy: 'skip' });
    assert.deepEqual(rel(plan.fire), [10]);
    assert.deepEqual(rel(plan.missed), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const strict = planCatchUp({ ...base, policy: 'skip', misfireGraceMs: 0 });
    assert.deepEqual(strict.fire, []);
    assert.equal(strict.missedCount, 10);
  });

  it('a time within grace fires under every policy, even outside a shorter window; bounds are inclusive', () => {
    for (const policy of ['all', 'latest', 'skip'] as const) {
      const plan = planCatchUp({ ...base, policy, catchUpWindowMs: 0, misfireGraceMs: 2500 });
      assert.deepEqual(rel(plan.fire), [8, 9, 10], policy);
      assert.deepEqual(rel(plan.missed), [1, 2, 3, 4, 5, 6, 7], policy);
    }
    // T+5s is exactly catchUpWindowMs (5.5 s) old: inside the window.
    assert.deepEqual(rel(planCatchUp({ ...base, policy: 'all', catchUpWindowMs: 5500 }).fire), [5, 6, 7, 8, 9, 10]);
  });

  it('a job that never fired catches nothing up, nor does one already up to date', () => {
    assert.deepEqual(planCatchUp({ ...base, policy: 'all', lastFiredMs: null }), {
      fire: [],
      missed: [],
      missedBeyond: 0,
      missedCount: 0,
      missedCountExact: true,
    });
    assert.deepEqual(planCatchUp({ ...base, policy: 'all', lastFiredMs: base.nowMs }).fire, []);
    assert.deepEqual(rel(planCatchUp({ ...base, policy: 'all', lastFiredMs: T + 9000 }).fire), [10]);
  });

  it('caps a backlog, keeping the newest and listing the oldest as missed', () => {
    const plan = planCatchUp({ ...base, policy: 'all', catchUpWindowMs: 3600_000, nowMs: T + 3600_000, maxFires: 100 });
    assert.equal(plan.fire.length, 100);
    assert.deepEqual(rel([plan.fire[0]!, plan.fire.at(-1)!]), [3501, 3600]);
    assert.equal(plan.missed.length, 3500);
    assert.deepEqual(rel([plan.missed[0]!, plan.missed.at(-1)!]), [1, 3500]);
    assert.equal(plan.missedCount, 3500);
  });

  it('finds the newest fires of a huge window without enumerating all of it, and counts the rest exactly', () => {
    const now = T + DAY;
    const plan = planCatchUp({ ...base, policy: 'all', catchUpWindowMs: DAY, nowMs: now });
    assert.equal(plan.fire.length, 1000);
    assert.equal(plan.fire[0], now - 999_000);
    assert.equal(plan.fire.at(-1), now);
    assert.equal(plan.missedCount, 86_400 - 1000);
    assert.equal(plan.missed.length + plan.missedBeyond, 85_400);
    assert.equal(plan.missed.length < 20_000, true, 'the missed list is bounded');
    assert.equal(plan.missed[0], T + 1000);
    assert.equal(plan.missedCountExact, true);
  });

  it('a very long outage is counted to a budget, not enumerated', () => {
    const plan = planCatchUp({ ...base, policy: 'skip', misfireGraceMs: 0, nowMs: T + 200_000_500 }); // 200,000 due, none on time
    assert.deepEqual(plan.fire, []);
    assert.equal(plan.missed.length, 10_000);
    assert.equal(plan.missed[0], T + 1000);
    assert.equal(plan.missedCountExact, false);
    assert.equal(plan.missedCount, 110_000);
  });
});
