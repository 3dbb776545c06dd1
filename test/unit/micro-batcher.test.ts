import { it } from 'node:test';
import assert from 'node:assert/strict';
import { MicroBatcher, flushByGroup } from '../../src/jobs/micro-batcher.js';

it('calls made in one turn go out as one batch, each with its own answer; a failed item fails alone', async () => {
  const batches: number[][] = [];
  const b = new MicroBatcher<number, number>(
    async (items) => {
      batches.push(items);
      return items.map((n) => (n === 3 ? { ok: false, error: new Error('three') } : { ok: true, value: n * 10 }));
    },
    { maxBatch: 4, maxInFlight: 1 },
  );
  const answers = await Promise.allSettled([1, 2, 3, 4, 5, 6].map((n) => b.submit(n)));
  assert.deepEqual(batches, [
    [1, 2, 3, 4],
    [5, 6],
  ]);
  assert.deepEqual(
    answers.map((a) => (a.status === 'fulfilled' ? a.value : (a.reason as Error).message)),
    [10, 20, 'three', 40, 50, 60],
  );
});

it('flushByGroup answers in the batch order, each group flushed once with its items in order', async () => {
  const items = ['a1', 'b1', 'a2', 'c1', 'b2', 'a3'];
  for (const parallel of [false, true]) {
    const flushed: string[][] = [];
    let inFlight = 0;
    let most = 0;
    const out = await flushByGroup(
      items,
      (s) => s[0],
      async (group) => {
        flushed.push(group);
        most = Math.max(most, ++inFlight);
        await new Promise((r) => setTimeout(r, 5));
        inFlight--;
        return group.map((s) => s.toUpperCase());
      },
      { parallel },
    );
    assert.deepEqual(out, ['A1', 'B1', 'A2', 'C1', 'B2', 'A3']);
    assert.deepEqual(flushed, [['a1', 'a2', 'a3'], ['b1', 'b2'], ['c1']]);
    assert.equal(most, parallel ? 3 : 1, parallel ? 'the groups side by side' : 'one group at a time');
  }
});
