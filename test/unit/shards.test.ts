import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidArgumentError } from '../../src/errors.js';
import { shardsToHandBack, type BalanceView } from '../../src/scheduler/shards/shard-balance.js';
import { ShardedJobs } from '../../src/scheduler/shards/shard-jobs.js';
import {
  MAX_SHARDS,
  fairShare,
  shardFenceResource,
  shardLeaseName,
  shardOf,
  validShardCount,
} from '../../src/scheduler/shards/shard-map.js';
import type { ScheduledJob, ScheduledJobs } from '../../src/cron/scheduled-job.js';

const names = Array.from({ length: 8000 }, (_, i) => `job-${i}`);

describe('shard map', () => {
  it('puts every job in shard 0 with one shard, and keeps the single leader names', () => {
    assert.ok(names.slice(0, 100).every((n) => shardOf(n, 1) === 0));
    assert.equal(shardLeaseName('app', 0, 1), 'cronwarden/app/scheduler');
    assert.equal(shardFenceResource(shardLeaseName('app', 0, 1)), 'scheduler/cronwarden/app/scheduler');
  });

  it('gives each shard its own lease and fence, naming the count (a changed count never shares one)', () => {
    const leases = Array.from({ length: 8 }, (_, i) => shardLeaseName('app', i, 8));
    assert.equal(new Set(leases).size, 8);
    assert.equal(leases[3], 'cronwarden/app/scheduler/shard-3-of-8');
    assert.notEqual(shardLeaseName('app', 3, 4), leases[3]);
    assert.equal(shardFenceResource(leases[3]), 'scheduler/cronwarden/app/scheduler/shard-3-of-8');
  });

  it('spreads 8,000 jobs over 8 shards within 10% of an even share, the same on every call', () => {
    const per = new Array<number>(8).fill(0);
    for (const n of names) per[shardOf(n, 8)]!++;
    for (const c of per) assert.ok(Math.abs(c - 1000) < 100, `shard sizes ${per.join(', ')}`);
    // Stable across processes and versions (a changed hash would move every job's fence): pinned.
    assert.deepEqual(
      ['job-0', 'job-1', 'billing/nightly', 'job-2'].map((n) => shardOf(n, 8)),
      [6, 5, 2, 2],
    );
    assert.deepEqual(
      ['job-0', 'job-1', 'job-2', 'job-3'].map((n) => shardOf(n, 3)),
      [1, 0, 1, 0],
    );
  });

  it('refuses a shard count that is not a whole number from 1 to the maximum', () => {
    for (const bad of [0, -1, 1.5, MAX_SHARDS + 1, Number.NaN, '8'])
      assert.throws(() => validShardCount(bad), InvalidArgumentError, String(bad));
    assert.equal(validShardCount(8), 8);
  });

  it('fair share is ceil(shards / live)', () => {
    assert.equal(fairShare(8, 3), 3);
    assert.equal(fairShare(8, 2), 4);
    assert.equal(fairShare(8, 5), 2);
    assert.equal(fairShare(8, 0), 8);
  });
});

describe('ShardedJobs', () => {
  const job = (name: string) => ({ name }) as ScheduledJob;
  const registry = (list: ScheduledJob[]): ScheduledJobs & { list: () => ScheduledJob[]; items: ScheduledJob[] } => {
    const r = {
      items: list,
      get: (n: string) => r.items.find((j) => j.name === n),
      require: (n: string) => {
        const j = r.items.find((x) => x.name === n);
        if (!j) throw new InvalidArgumentError(`unknown ${n}`);
        return j;
      },
      list: () => r.items,
    };
    return r;
  };

  it('splits the jobs so every job is in exactly its own shard', () => {
    const all = registry(names.slice(0, 500).map(job));
    const split = new ShardedJobs(all, 4);
    const seen = new Map<string, number>();
    for (let s = 0; s < 4; s++)
      for (const j of split.view(s).list()) {
        assert.equal(shardOf(j.name, 4), s);
        assert.ok(!seen.has(j.name), `${j.name} in two shards`);
        seen.set(j.name, s);
      }
    assert.equal(seen.size, 500);
    const name = 'job-7';
    const own = shardOf(name, 4);
    assert.equal(split.view(own).get(name)?.name, name);
    assert.equal(split.view((own + 1) % 4).get(name), undefined);
    assert.throws(() => split.view((own + 1) % 4).require(name), InvalidArgumentError);
  });

  it('sees jobs added to the underlying list (runtime schedules) once the list changes', () => {
    const all = registry(names.slice(0, 10).map(job));
    const split = new ShardedJobs(all, 2);
    const before = split.view(0).list().length + split.view(1).list().length;
    all.items = [...all.items, job('added-later')];
    const after = split.view(0).list().length + split.view(1).list().length;
    assert.equal(after, before + 1);
  });

  it('with one shard, the view is the registry itself', () => {
    const all = registry([job('a')]);
    assert.equal(new ShardedJobs(all, 1).view(0), all);
  });
});

describe('shardsToHandBack', () => {
  const base = (over: Partial<BalanceView>): BalanceView => ({
    shards: 8,
    me: 'a',
    live: ['a', 'b', 'c'],
    fresh: ['a', 'b', 'c'],
    holders: ['a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'],
    mine: [0, 1, 2, 3, 4, 5, 6, 7].map((shard) => ({ shard, wonAt: 1000 + shard })),
    ...over,
  });

  it('the first replica up holds every shard; once two more are live it hands back all above its share (3)', () => {
    const back = shardsToHandBack(base({}));
    assert.equal(back.length, 5);
    // The most recently won go first.
    assert.deepEqual(back, [7, 6, 5, 4, 3]);
  });

  it('hands back nothing while no other live replica has room (everyone at the share)', () => {
    const holders = ['a', 'a', 'a', 'b', 'b', 'b', 'c', 'c'];
    const mine = [0, 1, 2].map((shard) => ({ shard, wonAt: 0 }));
    assert.deepEqual(shardsToHandBack(base({ holders, mine })), []);
  });

  it('after a crash, the survivors keep up to ceil(8/2) = 4 each: nothing moves back and forth', () => {
    const holders = ['a', 'a', 'a', 'a', 'b', 'b', 'b', 'b'];
    const mine = [0, 1, 2, 3].map((shard) => ({ shard, wonAt: 0 }));
    assert.deepEqual(shardsToHandBack(base({ live: ['a', 'b'], fresh: ['a', 'b'], holders, mine })), []);
  });

  it('hands back no more than the others have room for', () => {
    // a leads 5, b 3 (at the share of 3 for three live), c none: c has room for 3, a's excess is 2.
    const holders = ['a', 'a', 'a', 'a', 'a', 'b', 'b', 'b'];
    const mine = [0, 1, 2, 3, 4].map((shard) => ({ shard, wonAt: 0 }));
    assert.equal(shardsToHandBack(base({ holders, mine })).length, 2);
  });

  it('hands nothing to a replica whose row is live but not fresh (it just died), and moves the newest won first', () => {
    const holders = ['a', 'a', 'a', 'a', 'b', 'b', 'b', null];
    // a led 0-2 for long and just took 3 from c, which died: c's row is under a TTL old but not fresh.
    const mine = [0, 1, 2, 3].map((shard) => ({ shard, wonAt: shard === 3 ? 99_000 : 0 }));
    assert.deepEqual(shardsToHandBack(base({ holders, mine, fresh: ['a', 'b'] })), []);
    // Had c been fresh, the shard that moves on is the one a took last, never one it already led.
    assert.deepEqual(shardsToHandBack(base({ holders, mine })), [3]);
  });

  it('counts itself live even before its own member row is read back', () => {
    const back = shardsToHandBack(base({ live: ['b'], fresh: ['b'] }));
    // a and b live: share 4, a leads 8, b has room for 4.
    assert.equal(back.length, 4);
  });

  it('ignores holders that are not live (a dead replica still named until its lease expires)', () => {
    const holders = ['a', 'a', 'a', 'a', 'z', 'z', 'z', 'z'];
    const mine = [0, 1, 2, 3].map((shard) => ({ shard, wonAt: 0 }));
    // live a, b: share 4; a at share: nothing to hand back even though b leads none yet.
    assert.deepEqual(shardsToHandBack(base({ live: ['a', 'b'], fresh: ['a', 'b'], holders, mine })), []);
  });
});
