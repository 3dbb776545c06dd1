/**
 * Sharded leadership: which shard a job belongs to, and each shard's lease and fence. With one
 * shard (the default) the names are the single leader's, so a deployment that turns sharding on
 * or off keeps its history; with N shards each has its own lease, so the fence of one shard never
 * refuses another's leader.
 */
import { InvalidArgumentError } from '../../errors.js';
import { fnv1a } from './stable-hash.js';

/** Enough for 100 replicas a few times over; each shard costs one lease renewal per renew period. */
export const MAX_SHARDS = 256;

/** The shard of a job: a stable hash of its name, the same on every replica and in every version. */
export function shardOf(job: string, shards: number): number {
  return shards <= 1 ? 0 : fnv1a(job) % shards;
}

/** Shard `shard` of `shards`' lease: `cronwarden/<ns>/scheduler` when unsharded. */
export function shardLeaseName(namespace: string, shard: number, shards: number): string {
  const single = `cronwarden/${namespace}/scheduler`;
  return shards <= 1 ? single : `${single}/shard-${shard}-of-${shards}`;
}

/** The fence resource that orders a shard's leaders (the ledger's cw_fences row). */
export function shardFenceResource(leaseName: string): string {
  return `scheduler/${leaseName}`;
}

/** Checked where the count enters: an integer from 1 to MAX_SHARDS. */
export function validShardCount(shards: unknown): number {
  if (typeof shards !== 'number' || !Number.isInteger(shards) || shards < 1 || shards > MAX_SHARDS)
    throw new InvalidArgumentError(`shards must be an integer from 1 to ${MAX_SHARDS}, got ${String(shards)}`);
  return shards;
}

/** No replica should lead more than this many shards while `live` replicas are up. */
export function fairShare(shards: number, live: number): number {
  return Math.ceil(shards / Math.max(1, live));
}
