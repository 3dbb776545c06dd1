/**
 * Rendezvous (highest random weight) hashing: which `k` of `members` own `key`. Every replica that
 * sees the same members picks the same owners without talking, and a member joining or leaving
 * moves only the keys it owns (1/n of them), where `hash mod n` would move almost all.
 * Hand-written: the npm packages for it are unmaintained, and the whole idea is FNV-1a and a sort.
 */
import { fnv1a } from '../shards/stable-hash.js';

/** The `k` members with the highest weight for `key` (all of them when there are `k` or fewer). */
export function rendezvousOwners(key: string, members: readonly string[], k: number): string[] {
  if (members.length <= k) return [...members];
  return members
    .map((m) => ({ m, w: fnv1a(`${key}\n${m}`) }))
    .sort((a, b) => b.w - a.w || (a.m < b.m ? -1 : 1))
    .slice(0, k)
    .map((x) => x.m);
}
