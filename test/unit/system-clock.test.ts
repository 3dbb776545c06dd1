import { it } from 'node:test';
import assert from 'node:assert/strict';
import { systemClock } from '../../src/clock.js';

it('a timer further away than setTimeout can hold (about 24.8 days) does not fire early', async () => {
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.name);
  process.on('warning', onWarning);
  let fired = false;
  const timer = systemClock.setTimer(() => (fired = true), 40 * 24 * 3600 * 1000); // a yearly job's next fire can be this far
  await new Promise((r) => setTimeout(r, 50));
  timer.cancel();
  process.off('warning', onWarning);
  assert.equal(fired, false, 'a 40-day timer fired within 50 ms');
  assert.deepEqual(
    warnings.filter((w) => w === 'TimeoutOverflowWarning'),
    [],
  );
});

it('short timers and sleeps still fire, and cancel and abort stop them', async () => {
  const order: string[] = [];
  systemClock.setTimer(() => order.push('b'), 20);
  systemClock.setTimer(() => order.push('a'), 5);
  systemClock.setTimer(() => order.push('cancelled'), 10).cancel();
  await systemClock.sleep(40);
  assert.deepEqual(order, ['a', 'b']);
  const abort = new AbortController();
  const sleeping = systemClock.sleep(10_000, abort.signal);
  abort.abort(new Error('stop'));
  await assert.rejects(sleeping, /stop/);
});
