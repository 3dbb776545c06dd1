/**
 * The sharded drill's measurements: a fault's rebalance time and longest leaderless shard over a
 * planted timeline, the spread of shards led, the bounds they are held to, the drill's job names
 * (every shard covered, unsharded names unchanged), and the sampler against a real (in-process)
 * lease backend.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { MemoryLeaseBackend } from '../../src/locks/memory.js';
import { judgeShards, shardBoundsMs } from '../../src/drill/faults.js';
import { drillJobNames, shardsWithoutJobs } from '../../src/drill/job-names.js';
import {
  isBalanced,
  isWhole,
  measureShards,
  shardsLed,
  ShardTimeline,
  type ShardSample,
} from '../../src/drill/shard-timeline.js';
import { shardOf } from '../../src/scheduler/shards/shard-map.js';

const T = 1_000_000;
const live3 = ['a', 'b', 'c'];

const s = (at: number, holders: (string | null)[], running: string[], joined = running): ShardSample => ({
  at,
  holders,
  running,
  joined,
});

/**
 * 8 shards over a, b, c (3, 3, 2). At T+0 a is killed: a stops running at the first sample after
 * the strike (T+20) and its replacement d is spawned (running, not joined) at T+30; a's leases lapse
 * at T+2000, b and c take shards 3 and 6 at T+2100 and shard 0 at T+2400 (4 and 4: fair for the two
 * joined), d joins at T+3000 and is handed two shards by T+3500.
 */
function killTimeline(): ShardSample[] {
  const bc = ['b', 'c'];
  const bcd = ['b', 'c', 'd'];
  return [
    s(T - 5000, ['a', 'b', 'c', 'a', 'b', 'c', 'a', 'b'], live3),
    s(T + 20, ['a', 'b', 'c', 'a', 'b', 'c', 'a', 'b'], bc),
    s(T + 30, ['a', 'b', 'c', 'a', 'b', 'c', 'a', 'b'], bcd, bc),
    s(T + 2000, [null, 'b', 'c', null, 'b', 'c', null, 'b'], bcd, bc),
    s(T + 2100, [null, 'b', 'c', 'c', 'b', 'c', 'b', 'b'], bcd, bc),
    s(T + 2400, ['c', 'b', 'c', 'c', 'b', 'c', 'b', 'b'], bcd, bc),
    s(T + 3000, ['c', 'b', 'c', 'c', 'b', 'c', 'b', 'b'], bcd),
    s(T + 3300, ['c', null, 'c', 'c', 'b', 'c', 'b', 'b'], bcd),
    s(T + 3350, ['c', 'd', 'c', 'c', 'b', 'c', 'b', 'b'], bcd),
    s(T + 3500, ['c', 'd', 'c', 'd', 'b', 'c', 'b', 'b'], bcd),
  ];
}

describe('sharded drill: measurements over a timeline', () => {
  it('balanced: every shard has a running holder, no live replica above ceil(shards / live)', () => {
    assert.equal(isBalanced(s(T, ['a', 'b', 'c', 'a', 'b', 'c', 'a', 'b'], live3)), true);
    // 4 + 4 + 0 is fair for two live replicas, not for three.
    assert.equal(isBalanced(s(T, ['a', 'a', 'a', 'a', 'b', 'b', 'b', 'b'], ['a', 'b'])), true);
    assert.equal(isBalanced(s(T, ['a', 'a', 'a', 'a', 'b', 'b', 'b', 'b'], live3)), false);
    // A replica still starting (running, no member beat yet) does not count for the share...
    assert.equal(isBalanced(s(T, ['a', 'a', 'a', 'a', 'b', 'b', 'b', 'b'], live3, ['a', 'b'])), true);
    // ... unless it already leads a shard: 5 + 2 + 1 is not fair for three.
    assert.equal(isBalanced(s(T, ['a', 'a', 'a', 'a', 'a', 'b', 'b', 'c'], live3, ['a', 'b'])), false);
    // A shard held by a replica that is not running (killed, frozen) has no leader.
    assert.equal(isBalanced(s(T, ['a', 'b', 'c', 'a', 'b', 'c', 'a', 'x'], live3)), false);
    assert.equal(isBalanced(s(T, ['a', 'b', 'c', 'a', 'b', 'c', 'a', null], live3)), false);
  });

  it('whole: every replica running, joined, and the shards balanced among them', () => {
    assert.equal(isWhole(s(T, ['a', 'b', 'c', 'a', 'b', 'c', 'a', 'b'], live3), 3), true);
    assert.equal(isWhole(s(T, ['a', 'a', 'a', 'a', 'b', 'b', 'b', 'b'], live3, ['a', 'b']), 3), false);
    assert.equal(isWhole(s(T, ['a', 'a', 'a', 'a', 'b', 'b', 'b', 'b'], ['a', 'b']), 3), false);
    assert.equal(isWhole(s(T, ['a', 'b', 'c', 'a', 'b', 'c', 'a', null], live3), 3), false);
  });

  it("kill: balanced once the survivors lead the killed replica's shards; the longest leaderless shard runs from the strike", () => {
    const m = measureShards(killTimeline(), T, T + 8000);
    // d is running but has not joined at T+2400: 4 + 4 is fair for b and c.
    assert.equal(m.rebalanceMs, 2400);
    // Shard 0: a's (dead) from T+20, no live holder until c takes it at T+2400; shard 6 until T+2100.
    assert.deepEqual([m.maxLeaderlessMs, m.maxLeaderlessShard], [2380, 0]);
  });

  it('the state sampled before the strike does not count as balanced after it', () => {
    const samples = killTimeline();
    // Nothing sampled after the strike yet: the old, balanced state is all there is.
    assert.equal(measureShards(samples.slice(0, 1), T, T + 10).rebalanceMs, 0);
    // A stretch that ends before the shards are balanced again: not balanced within it.
    assert.equal(measureShards(samples, T, T + 2300).rebalanceMs, null);
    // Still without a leader at the end of the stretch: the stretch runs to its end.
    assert.deepEqual(measureShards(samples, T, T + 1000), {
      rebalanceMs: null,
      maxLeaderlessMs: 980,
      maxLeaderlessShard: 0,
    });
  });

  it('a later stretch sees the hand-over to the replacement: shard 1 without a leader for 50 ms', () => {
    const m = measureShards(killTimeline(), T + 3200, T + 8000);
    assert.deepEqual(m, { rebalanceMs: 300, maxLeaderlessMs: 50, maxLeaderlessShard: 1 });
  });

  it('a stretch in which nothing happened: balanced at once, no shard without a leader', () => {
    assert.deepEqual(measureShards(killTimeline(), T + 4000, T + 9000), {
      rebalanceMs: 0,
      maxLeaderlessMs: 0,
      maxLeaderlessShard: null,
    });
  });

  it('lists the shards each replica led at some point', () => {
    assert.deepEqual(shardsLed(killTimeline()), {
      a: [0, 3, 6],
      b: [1, 4, 6, 7],
      c: [0, 2, 3, 5],
      d: [1, 3],
    });
  });
});

describe('sharded drill: bounds', () => {
  it('rebalance within 2 TTLs after kill, term and stop; no shard leaderless past TTL + retry + tick', () => {
    // The electors' default retry period is TTL / 5.
    assert.deepEqual(shardBoundsMs('kill', 2000), { rebalanceMs: 4000, leaderlessMs: 2000 + 400 + 1000 });
    assert.deepEqual(shardBoundsMs('term', 2000), { rebalanceMs: 4000, leaderlessMs: 1500 });
    assert.deepEqual(shardBoundsMs('link-cut', 2000), { rebalanceMs: null, leaderlessMs: 3400 });
    assert.deepEqual(shardBoundsMs('queue-flush', 2000), { rebalanceMs: null, leaderlessMs: null });
  });

  it('judges a fault by them', () => {
    const fine = { rebalanceMs: 2400, maxLeaderlessMs: 2380, maxLeaderlessShard: 0 };
    assert.deepEqual(judgeShards('kill', 2000, T, fine), []);
    const slow = judgeShards('kill', 2000, T, { rebalanceMs: 4100, maxLeaderlessMs: 3500, maxLeaderlessShard: 5 });
    assert.equal(slow.length, 2);
    assert.match(slow[0]!, /^rebalance: kill at .*: shards balanced after 4100 ms, bound 4000 ms$/);
    assert.match(slow[1]!, /^I5: kill at .*: shard 5 had no live leader for 3500 ms, bound 3400 ms$/);
    assert.match(
      judgeShards('term', 2000, T, { ...fine, rebalanceMs: null })[0]!,
      /shards balanced not before the next fault/,
    );
    // A link cut leaves the cut-off replica running: the spread is measured, not bounded.
    assert.deepEqual(judgeShards('link-cut', 2000, T, { ...fine, rebalanceMs: null }), []);
  });
});

describe('sharded drill: job names', () => {
  it('unsharded: drill-0 .. drill-n-1, as always', () => {
    assert.deepEqual(drillJobNames(4), ['drill-0', 'drill-1', 'drill-2', 'drill-3']);
    assert.deepEqual(drillJobNames(4, 1), drillJobNames(4));
  });

  it('sharded: job i lands in shard i mod N, so N jobs cover every shard; names are distinct and stable', () => {
    for (const shards of [2, 3, 8, 16, 256]) {
      const names = drillJobNames(2 * shards, shards);
      names.forEach((n, i) => assert.equal(shardOf(n, shards), i % shards, `${n} of ${shards}`));
      assert.equal(new Set(names).size, names.length);
      assert.match(names.join(' '), /^drill-0\S* drill-1\S*/);
      assert.deepEqual(shardsWithoutJobs(shards, shards), []);
    }
    assert.deepEqual(drillJobNames(8, 8), drillJobNames(8, 8));
    assert.deepEqual(shardsWithoutJobs(3, 8), [3, 4, 5, 6, 7]);
  });
});

describe('sharded drill: the sampler', () => {
  it('records each shard holder, the running and the joined replicas, only when they change', async () => {
    const backend = new MemoryLeaseBackend();
    let running = ['b', 'a'];
    let joined = ['b'];
    const timeline = new ShardTimeline(backend, ['s0', 's1'], () => ({ running, joined }), 5);
    const seen = () => timeline.samples.map((x) => JSON.stringify([x.holders, x.running, x.joined]));
    try {
      await sleep(30);
      assert.deepEqual(seen(), ['[[null,null],["a","b"],["b"]]']);
      const lease = await backend.tryAcquire({ name: 's0', holder: 'b', ttlMs: 60_000 });
      await backend.tryAcquire({ name: 's1', holder: 'a', ttlMs: 60_000 });
      await sleep(30);
      running = ['b'];
      await sleep(30);
      joined = [];
      await sleep(30);
      await backend.release(lease!);
      await sleep(30);
      assert.deepEqual(seen(), [
        '[[null,null],["a","b"],["b"]]',
        '[["b","a"],["a","b"],["b"]]',
        '[["b","a"],["b"],["b"]]',
        '[["b","a"],["b"],[]]',
        '[[null,"a"],["b"],[]]',
      ]);
      const times = timeline.samples.map((x) => x.at);
      assert.deepEqual(
        times,
        [...times].sort((x, y) => x - y),
      );
    } finally {
      await timeline.stop();
      await backend.close();
    }
  });
});
