import { it } from 'node:test';
import assert from 'node:assert/strict';
import { FireQueue } from '../../src/scheduler/firing/fire-queue.js';

it('pops entries in time order and popDue takes exactly the due ones', () => {
  const q = new FireQueue();
  const times = Array.from({ length: 1000 }, (_, i) => (i * 7919) % 1000);
  for (const at of times) q.push({ at, job: `j${at}`, after: 0 });
  assert.equal(q.size, 1000);
  const due = q.popDue(99);
  assert.deepEqual(
    due.map((e) => e.at),
    Array.from({ length: 100 }, (_, i) => i),
  );
  let last = -1;
  while (q.size > 0) {
    const e = q.pop()!;
    assert.ok(e.at >= last, `${e.at} after ${last}`);
    last = e.at;
  }
  assert.equal(last, 999);
  assert.equal(q.pop(), undefined);
});
