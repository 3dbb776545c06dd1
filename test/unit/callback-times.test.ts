import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CallbackTimes, SLOW_CALLBACK_MS } from '../../src/jobs/callback-times.js';

describe('CallbackTimes', () => {
  it('groups a job not seen yet, and one whose callbacks are quick', () => {
    const times = new CallbackTimes();
    assert.equal(times.groups('report'), true);
    for (let i = 0; i < 10; i++) times.observe('report', 0.5);
    assert.equal(times.groups('report'), true);
  });

  it('commits alone a job whose callbacks take longer than SLOW_CALLBACK_MS, each job apart', () => {
    const times = new CallbackTimes();
    times.observe('slow', SLOW_CALLBACK_MS * 10);
    times.observe('quick', 1);
    assert.equal(times.groups('slow'), false);
    assert.equal(times.groups('quick'), true, "another job's slow callbacks do not count");
  });

  it('follows a change: quick callbacks bring a job back into groups', () => {
    const times = new CallbackTimes();
    times.observe('job', 300);
    assert.equal(times.groups('job'), false);
    let back = 0;
    while (!times.groups('job') && back < 100) {
      times.observe('job', 1);
      back++;
    }
    assert.ok(back > 1 && back < 20, `back in groups after ${back} quick callbacks`);
  });
});
