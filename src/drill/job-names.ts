/**
 * The names of the drill's jobs, the same in the drill (what it expects) and in every replica's
 * workload (what it defines). Unsharded they are `drill-0` .. `drill-<n-1>`, as always. With N
 * shards, job i must land in shard i mod N, so that every shard has a job due every second once
 * there are at least N jobs (a hash alone leaves shards empty): `drill-<i>` where the hash puts it
 * there already, else `drill-<i>-<k>` for the smallest k that does.
 */
import { DrillError } from '../errors.js';
import { shardOf } from '../scheduler/shards/shard-map.js';

export function drillJobNames(count: number, shards = 1): string[] {
  return Array.from({ length: count }, (_, i) => (shards <= 1 ? `drill-${i}` : nameInShard(i, shards)));
}

function nameInShard(i: number, shards: number): string {
  const shard = i % shards;
  const base = `drill-${i}`;
  if (shardOf(base, shards) === shard) return base;
  // About `shards` tries on average; the cap only guards against a hash that never gets there.
  for (let k = 1; k <= 1000 * shards; k++) {
    const name = `${base}-${k}`;
    if (shardOf(name, shards) === shard) return name;
  }
  throw new DrillError(`no job name for shard ${shard} of ${shards}`);
}

/** Shards with no drill job (none due every second there), when there are fewer jobs than shards. */
export function shardsWithoutJobs(count: number, shards: number): number[] {
  const covered = new Set(drillJobNames(count, shards).map((n) => shardOf(n, shards)));
  return Array.from({ length: shards }, (_, s) => s).filter((s) => !covered.has(s));
}
