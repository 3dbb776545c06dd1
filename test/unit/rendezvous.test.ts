import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rendezvousOwners } from '../../src/scheduler/stand-in/rendezvous.js';

const members = Array.from({ length: 10 }, (_, i) => `replica-${i}`);
const keys = Array.from({ length: 5000 }, (_, i) => `job-${i}`);

describe('rendezvousOwners', () => {
  it('gives every replica the same k owners, whatever order it lists the members in', () => {
    const shuffled = [...members].reverse();
    for (const key of keys.slice(0, 200)) {
      const a = rendezvousOwners(key, members, 2);
      assert.equal(a.length, 2);
      assert.deepEqual(a, rendezvousOwners(key, shuffled, 2));
    }
  });

  it('spreads keys evenly: each of 10 members owns 20% of 5,000 keys at k = 2, within 3 points', () => {
    const owned = new Map<string, number>();
    for (const key of keys) for (const m of rendezvousOwners(key, members, 2)) owned.set(m, (owned.get(m) ?? 0) + 1);
    for (const m of members) {
      const share = (owned.get(m) ?? 0) / keys.length;
      assert.ok(Math.abs(share - 0.2) < 0.03, `${m} owns ${(share * 100).toFixed(1)}%`);
    }
  });

  it('a member leaving moves only the keys it owned', () => {
    const without = members.filter((m) => m !== 'replica-3');
    let moved = 0;
    for (const key of keys) {
      const before = rendezvousOwners(key, members, 1)[0];
      const after = rendezvousOwners(key, without, 1)[0];
      if (before !== after) {
        moved++;
        assert.equal(before, 'replica-3', `${key} moved from ${before}, which did not leave`);
      }
    }
    assert.ok(moved > 0);
  });

  it('k at or above the member count: all of them', () => {
    assert.deepEqual(rendezvousOwners('x', ['a', 'b'], 2).sort(), ['a', 'b']);
    assert.deepEqual(rendezvousOwners('x', [], 2), []);
  });
});
