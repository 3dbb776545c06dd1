import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ClaimAhead, WAIT_AHEAD_MS } from '../../src/jobs/claim-ahead.js';

describe('ClaimAhead', () => {
  it('claims the least ahead before any handler has run, and while handlers are slow', () => {
    const ahead = new ClaimAhead(10, 8, 16);
    assert.equal(ahead.places(), 80);
    for (let i = 0; i < 50; i++) ahead.observe(1000);
    assert.equal(ahead.places(), 80);
  });

  it('claims up to the most ahead while runs ahead would wait no longer than WAIT_AHEAD_MS', () => {
    const ahead = new ClaimAhead(10, 8, 16);
    assert.equal(ahead.observe(0.2), 160, 'quick handlers: every place');
    const between = new ClaimAhead(10, 8, 16);
    assert.equal(between.observe(WAIT_AHEAD_MS / 12), 120, '12 handlers a slot fit in the wait');
  });

  it('follows a change of handler times: one slow handler among quick ones draws it back at once', () => {
    const ahead = new ClaimAhead(2, 8, 16);
    for (let i = 0; i < 30; i++) ahead.observe(1);
    assert.equal(ahead.places(), 32);
    assert.equal(ahead.observe(2000), 16, 'the mean jumps past the wait with a single 2 s handler');
    let places = 16;
    for (let i = 0; i < 200 && places < 32; i++) places = ahead.observe(1);
    assert.equal(places, 32, 'and quick handlers bring it back');
  });

  it('says whether, every slot busy, one comes free within a time: the mean hold over the slots', () => {
    const ahead = new ClaimAhead(10, 8, 16);
    assert.equal(ahead.slotFreesWithin(5), false, 'not before any handler has run');
    ahead.observe(50); // 10 slots held 50 ms each: one frees every 5 ms
    assert.equal(ahead.slotFreesWithin(5), true);
    assert.equal(ahead.slotFreesWithin(4.9), false);
  });

  it('hands runs that cannot start back once a slot frees less often than every WAIT_AHEAD_MS', () => {
    const ahead = new ClaimAhead(10, 8, 16);
    assert.equal(ahead.handsBack(), false, 'not before any handler has run');
    ahead.observe(WAIT_AHEAD_MS * 10); // one slot of 10 frees every WAIT_AHEAD_MS: still quick enough
    assert.equal(ahead.handsBack(), false);
    const slow = new ClaimAhead(10, 8, 16);
    slow.observe(WAIT_AHEAD_MS * 10 + 10);
    assert.equal(slow.handsBack(), true);
  });
});
