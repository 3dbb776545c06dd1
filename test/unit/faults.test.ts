/** The drill's fault schedule: replayable from its seed, every kind covered evenly. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  applicableFaults,
  faultConflict,
  faultSchedule,
  i5BoundMs,
  judgeFault,
  seededRandom,
  type FaultKind,
  type FaultObservation,
} from '../../src/drill/faults.js';

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
    assert.deepEqual(
      new Set(faultSchedule(['kill', 'term', 'stop'], 1, seededRandom(3))),
      new Set(['kill', 'term', 'stop']),
    );
  });

  it('offers only the faults that mean something for a backend', () => {
    assert.ok(applicableFaults('etcd', true).includes('backend-restart-all'));
    assert.ok(!applicableFaults('redis', true).includes('backend-restart-all'));
    assert.ok(!applicableFaults('postgres', false).includes('clock-skew'));
    assert.ok(applicableFaults('postgres', true).includes('clock-skew'));
    // The queue's, the ledger's and the host's faults apply everywhere; the two that need a
    // topology of their own (a ledger standby, a Sentinel group) only when named.
    for (const backend of ['etcd', 'redis', 'postgres'] as const) {
      const kinds = applicableFaults(backend, false);
      for (const k of ['queue-restart', 'queue-flush', 'ledger-restart', 'cpu-starve'] as const)
        assert.ok(kinds.includes(k), `${backend}: ${k}`);
      assert.ok(!kinds.includes('ledger-failover') && !kinds.includes('redis-sentinel-failover'), backend);
    }
  });

  it('refuses Sentinel on another backend, or beside the link faults its proxies cannot serve', () => {
    assert.equal(faultConflict('redis', ['redis-sentinel-failover', 'kill', 'ledger-failover']), null);
    assert.equal(faultConflict('etcd', ['link-cut', 'kill']), null);
    assert.equal(
      faultConflict('postgres', ['redis-sentinel-failover']),
      'redis-sentinel-failover needs --backend redis',
    );
    assert.match(
      faultConflict('redis', ['redis-sentinel-failover', 'link-cut', 'link-slow'])!,
      /cannot be combined with link-cut, link-slow/,
    );
  });
});

describe('judging one fault (I5, counted, flap)', () => {
  const ttlMs = 2000;
  const at = Date.UTC(2026, 0, 1, 12);
  const crashBound = i5BoundMs('kill', ttlMs)!; // 2000 + 400 * 1.5 + 1000 + 500
  const observed = (o: Partial<FaultObservation> & Pick<FaultObservation, 'kind'>): FaultObservation => ({
    ttlMs,
    strikeAt: at,
    flowing: true,
    leaderBefore: { id: 'r0.0', token: 7n },
    firstFireAt: at + 300,
    firstNewTenureFireAt: at + 2900,
    handoverMs: 2100,
    leaderChanges: 1,
    ...o,
  });

  it('has the bounds I5 sets', () => {
    assert.equal(crashBound, 4100);
    assert.equal(i5BoundMs('stop', ttlMs), 4100);
    assert.equal(i5BoundMs('link-cut', ttlMs), 4100);
    assert.equal(i5BoundMs('term', ttlMs), 1500);
    assert.equal(i5BoundMs('link-slow', ttlMs), null);
    assert.equal(i5BoundMs('backend-restart', ttlMs), null);
    for (const k of [
      'queue-restart',
      'queue-flush',
      'ledger-restart',
      'ledger-failover',
      'redis-sentinel-failover',
      'cpu-starve',
    ] as const)
      assert.equal(i5BoundMs(k, ttlMs), null, k);
  });

  it("a clean failover counts, and its gap runs to the new leader's first fire, not the old leader's", () => {
    for (const kind of ['kill', 'stop', 'link-cut'] as const) {
      const j = judgeFault(observed({ kind }));
      assert.deepEqual(j, { gapMs: 2900, boundMs: crashBound, counted: true, violations: [] }, kind);
    }
    const term = judgeFault(
      observed({ kind: 'term', firstFireAt: at + 40, firstNewTenureFireAt: at + 700, handoverMs: 12 }),
    );
    assert.deepEqual(term, { gapMs: 700, boundMs: 1500, counted: true, violations: [] });
  });

  it('a link-cut where only the old leader committed after the strike does not count and breaks I5', () => {
    // The cut-off leader's ledger link is intact: it fires 300 ms after the strike, but nobody
    // with a higher token ever fires. The old check (any fire after the strike) passed this.
    for (const kind of ['link-cut', 'kill', 'stop', 'term'] as const) {
      const j = judgeFault(
        observed({ kind, firstFireAt: at + 300, firstNewTenureFireAt: null, handoverMs: null, leaderChanges: 0 }),
      );
      assert.equal(j.counted, false, kind);
      assert.equal(j.gapMs, null, kind);
      assert.equal(j.violations.length, 1, kind);
      assert.match(
        j.violations[0]!,
        new RegExp(
          `^I5: ${kind} at .*no fire under a new leader \\(token > 7\\); only the old leader \\(token 7\\) committed after the strike`,
        ),
      );
    }
  });

  it("a new leader's first fire past the bound is an I5 violation, even though the old leader fired at once", () => {
    const j = judgeFault(
      observed({ kind: 'link-cut', firstFireAt: at + 100, firstNewTenureFireAt: at + crashBound + 1 }),
    );
    assert.equal(j.counted, true);
    assert.equal(j.gapMs, crashBound + 1);
    assert.deepEqual(j.violations, [
      `I5: link-cut at ${new Date(at).toISOString()}: first fire of the new leader after ${crashBound + 1} ms, bound ${crashBound} ms`,
    ]);
    const slowTerm = judgeFault(observed({ kind: 'term', firstNewTenureFireAt: at + 1600, handoverMs: 20 }));
    assert.equal(slowTerm.violations.length, 1);
    assert.match(slowTerm.violations[0]!, /^I5: term .* after 1600 ms, bound 1500 ms/);
  });

  it('a handover past the bound is an I5 violation', () => {
    const j = judgeFault(
      observed({ kind: 'kill', handoverMs: crashBound + 50, firstNewTenureFireAt: at + crashBound }),
    );
    assert.equal(j.counted, true);
    assert.deepEqual(j.violations, [
      `I5: kill at ${new Date(at).toISOString()}: new leader after ${crashBound + 50} ms, bound ${crashBound} ms`,
    ]);
  });

  it('a leader change during link-slow is a flap; none is clean', () => {
    const quiet = { firstFireAt: at + 500, firstNewTenureFireAt: null, handoverMs: null } as const;
    const clean = judgeFault(observed({ kind: 'link-slow', ...quiet, leaderChanges: 0 }));
    assert.deepEqual(clean, { gapMs: 500, boundMs: null, counted: true, violations: [] });
    const flap = judgeFault(observed({ kind: 'link-slow', ...quiet, leaderChanges: 2, detail: '75 ± 50 ms each way' }));
    assert.equal(flap.counted, true);
    assert.deepEqual(flap.violations, [
      `flap: link-slow (75 ± 50 ms each way) at ${new Date(at).toISOString()} changed the leader 2 time(s)`,
    ]);
  });

  it('a fault with no fires before it, no leader, or no fire after it proves nothing', () => {
    for (const o of [{ flowing: false }, { leaderBefore: null }, { firstFireAt: null }] as const) {
      const j = judgeFault(observed({ kind: 'clock-skew', firstNewTenureFireAt: null, leaderChanges: 0, ...o }));
      assert.equal(j.counted, false, JSON.stringify(o));
      assert.equal(j.violations.length, 1);
      assert.match(j.violations[0]!, /^fault clock-skew at .* proves nothing/);
    }
    const unknownLeader = judgeFault(observed({ kind: 'kill', leaderBefore: null }));
    assert.equal(unknownLeader.counted, false);
    assert.match(unknownLeader.violations[0]!, /proves nothing \(fires flowing before: true, leader known: false/);
  });
});
