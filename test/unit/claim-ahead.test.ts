import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ClaimAhead, WAIT_AHEAD_MS } from '../../src/jobs/claim-ahead.js';

describe('ClaimAhead', () => {
  it('lets none wait before any handler has ended: claims only for free slots, and hands back', () => {
    const ahead = new ClaimAhead(10, 16);
    assert.equal(ahead.waiting(), 0);
    assert.equal(ahead.places(), 10, 'room for runs claimed for free slots');
    assert.equal(ahead.handsBack(), true);
  });

  it('lets up to the most wait while runs waiting would wait no longer than WAIT_AHEAD_MS', () => {
    const ahead = new ClaimAhead(10, 16);
    assert.equal(ahead.observe(0.2), 160, 'quick handlers: every place');
    const between = new ClaimAhead(10, 16);
    assert.equal(between.observe(WAIT_AHEAD_MS / 12.5), 125, '12.5 handlers a slot fit in the wait');
    const medium = new ClaimAhead(10, 16);
    assert.equal(medium.observe(WAIT_AHEAD_MS / 2), 20, '2 a slot');
    assert.equal(medium.handsBack(), false);
  });

  it('hands back once handlers take longer than WAIT_AHEAD_MS: only the runs that may wait are held', () => {
    const atWait = new ClaimAhead(10, 16);
    atWait.observe(WAIT_AHEAD_MS); // a run a slot waits one handler: still within the wait
    assert.equal(atWait.handsBack(), false);
    assert.equal(atWait.places(), 10);
    const medium = new ClaimAhead(10, 16);
    medium.observe(WAIT_AHEAD_MS * 2); // 100 ms: 5 runs over 10 slots wait 50 ms
    assert.equal(medium.handsBack(), true);
    assert.equal(medium.waiting(), 5);
    assert.equal(medium.places(), 15, 'the runs claimed for free slots, and 5 that may wait');
    const slow = new ClaimAhead(10, 16);
    slow.observe(WAIT_AHEAD_MS * 10 + 10); // a slot frees less often than every WAIT_AHEAD_MS
    assert.equal(slow.handsBack(), true);
    assert.equal(slow.waiting(), 0, 'none may wait');
    assert.equal(slow.places(), 10);
    const one = new ClaimAhead(1, 16);
    one.observe(WAIT_AHEAD_MS + 1);
    assert.equal(one.handsBack(), true, 'one slot: a handler over the wait is already too long');
  });

  it('follows a change of handler times: one slow handler among quick ones draws it back at once', () => {
    const ahead = new ClaimAhead(2, 16);
    for (let i = 0; i < 30; i++) ahead.observe(1);
    assert.equal(ahead.places(), 32);
    // The mean jumps to about 101 ms with a single 2 s handler: it hands back, with room for 2.
    assert.equal(ahead.observe(2000), 2);
    assert.equal(ahead.handsBack(), true);
    let places = 2;
    for (let i = 0; i < 200 && places < 32; i++) places = ahead.observe(1);
    assert.equal(places, 32, 'and quick handlers bring it back');
    assert.equal(ahead.handsBack(), false);
  });

  it('says whether, every slot busy, one comes free within a time: the mean hold over the slots', () => {
    const ahead = new ClaimAhead(10, 16);
    assert.equal(ahead.slotFreesWithin(5), false, 'not before any handler has run');
    ahead.observe(50); // 10 slots held 50 ms each: one frees every 5 ms
    assert.equal(ahead.slotFreesWithin(5), true);
    assert.equal(ahead.slotFreesWithin(4.9), false);
  });
});
