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

it('popDue with a limit takes the earliest due entries and leaves the rest due', () => {
  const q = new FireQueue();
  for (let at = 0; at < 50; at++) q.push({ at: 49 - at, job: `j${at}`, after: 0 });
  assert.deepEqual(
    q.popDue(30, 10).map((e) => e.at),
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
  );
  assert.deepEqual(
    q.popDue(30, 100).map((e) => e.at),
    Array.from({ length: 21 }, (_, i) => 10 + i),
  );
  assert.equal(q.size, 19);
  assert.deepEqual(q.popDue(30, 5), []);
});
