import { it } from 'node:test';
import assert from 'node:assert/strict';
import { ManualClock } from '../support/manual-clock.js';

it('the manual clock: a sleep resolves when time reaches it, not before, and an abort rejects it', async () => {
  const clock = new ManualClock();
  let woke = false;
  const sleeping = clock.sleep(1000).then(() => (woke = true));
  await clock.advance(999);
  assert.equal(woke, false);
  await clock.advance(1);
  await sleeping;
  assert.equal(woke, true);
  const abort = new AbortController();
  const aborted = clock.sleep(1000, abort.signal);
  abort.abort(new Error('stop'));
  await assert.rejects(aborted, /stop/);
  assert.equal(clock.pending, 0, 'an aborted sleep leaves no timer behind');
});
