/**
 * Rendezvous (highest random weight) hashing: which `k` of `members` own `key`. Every replica that
 * sees the same members picks the same owners without talking, and a member joining or leaving
 * moves only the keys it owns (1/n of them), where `hash mod n` would move almost all.
 * Hand-written: the npm packages for it are unmaintained, and the whole idea is FNV-1a and a sort.
 */

/** FNV-1a, 32 bits: fast, and spread well enough for choosing among a handful of members. */
function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  // A final avalanche (murmur3's), so keys that differ in their last characters still spread.
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The `k` members with the highest weight for `key` (all of them when there are `k` or fewer). */
export function rendezvousOwners(key: string, members: readonly string[], k: number): string[] {
  if (members.length <= k) return [...members];
  return members
    .map((m) => ({ m, w: fnv1a(`${key}\n${m}`) }))
    .sort((a, b) => b.w - a.w || (a.m < b.m ? -1 : 1))
    .slice(0, k)
    .map((x) => x.m);
}
