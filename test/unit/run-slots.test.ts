import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { RunSlots } from '../../src/jobs/run-slots.js';

describe('RunSlots', () => {
  it('hands freed slots to callers in line in order, those taking `ahead` first (in their own order)', async () => {
    const slots = new RunSlots(1);
    assert.equal(await slots.take(1), 1);
    const order: string[] = [];
    const wait = (name: string, ahead: boolean) =>
      slots.take(1, undefined, { ahead }).then((n) => {
        order.push(`${name}:${n}`);
      });
    const all = [wait('fresh 1', false), wait('back 1', true), wait('fresh 2', false), wait('back 2', true)];
    for (let i = 0; i < 4; i++) {
      slots.give();
      await new Promise((r) => setImmediate(r));
    }
    await Promise.all(all);
    assert.deepEqual(order, ['back 1:1', 'back 2:1', 'fresh 1:1', 'fresh 2:1']);
    assert.equal(slots.busy, 1);
  });

  it('takes a free slot at once whatever the line, and gives up waiting when its signal aborts', async () => {
    const slots = new RunSlots(2);
    assert.equal(await slots.take(5), 2, 'as many as are free');
    const stop = new AbortController();
    const waiting = slots.take(1, stop.signal);
    stop.abort();
    assert.equal(await waiting, 0);
    slots.give(2);
    assert.equal(slots.busy, 0, 'the aborted caller took nothing');
    assert.equal(await slots.take(1, undefined, { ahead: true }), 1);
  });
});

describe('RunSlots.resize', () => {
  it('more slots go to callers in line at once; fewer leave slots in use alone and grant none until below the size', async () => {
    const slots = new RunSlots(2);
    assert.equal(await slots.take(2), 2);
    const waiting = slots.take(3);
    slots.resize(4);
    assert.equal(await waiting, 2, 'the two new slots');
    assert.equal(slots.busy, 4);
    slots.resize(1);
    assert.equal(slots.size, 1);
    assert.equal(slots.busy, 4, 'slots in use stay in use');
    let granted = -1;
    void slots.take(1).then((n) => (granted = n));
    slots.give(3);
    await new Promise((r) => setImmediate(r));
    assert.equal(granted, -1, 'one still in use: the only slot');
    slots.give(1);
    await new Promise((r) => setImmediate(r));
    assert.equal(granted, 1);
    assert.throws(() => slots.resize(0), RangeError);
  });
});

describe('RunSlots.watch', () => {
  it('calls its listener at every give or resize, not before, and no more once unwatched', async () => {
    const slots = new RunSlots(2);
    await slots.take(2);
    let changed = 0;
    const unwatch = slots.watch(() => changed++);
    assert.equal(await slots.take(1, AbortSignal.abort()), 0, 'a take that gets nothing');
    assert.equal(changed, 0, 'nothing given yet');
    slots.give(1);
    assert.equal(changed, 1, 'a give');
    slots.resize(3);
    assert.equal(changed, 2, 'a resize');
    unwatch();
    slots.give(1);
    assert.equal(changed, 2, 'unwatched');
  });
});
