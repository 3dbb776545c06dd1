/** The drill's fault schedule: replayable from its seed, every kind covered evenly. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { applicableFaults, faultSchedule, seededRandom, type FaultKind } from '../../src/drill/faults.js';

describe('fault schedule', () => {
  it('the same seed replays the same schedule; another seed orders it differently', () => {
    const kinds: FaultKind[] = ['kill', 'term', 'stop', 'link-cut'];
    const a = faultSchedule(kinds, 30, seededRandom(7));
    assert.deepEqual(faultSchedule(kinds, 30, seededRandom(7)), a);
    assert.notDeepEqual(faultSchedule(kinds, 30, seededRandom(8)), a);
  });

  it('gives every kind an equal share, the remainder at random, and each kind at least once', () => {
    const count = (s: FaultKind[], k: FaultKind) => s.filter((x) => x === k).length;
    const forty = faultSchedule(['kill', 'term'], 40, seededRandom(1));
    assert.equal(count(forty, 'kill'), 20);
    assert.equal(count(forty, 'term'), 20);
    const odd = faultSchedule(['kill', 'term', 'stop'], 10, seededRandom(2));
    assert.equal(odd.length, 10);
    for (const k of ['kill', 'term', 'stop'] as const) assert.ok(count(odd, k) >= 3);
    assert.deepEqual(new Set(faultSchedule(['kill', 'term', 'stop'], 1, seededRandom(3))), new Set(['kill', 'term', 'stop']));
  });

  it('offers only the faults that mean something for a backend', () => {
    assert.ok(applicableFaults('etcd', true).includes('backend-restart-all'));
    assert.ok(!applicableFaults('redis', true).includes('backend-restart-all'));
    assert.ok(!applicableFaults('postgres', false).includes('clock-skew'));
    assert.ok(applicableFaults('postgres', true).includes('clock-skew'));
  });
});
