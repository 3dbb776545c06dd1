/**
 * A stable 32-bit hash of a string, the same in every process and every version: it decides which
 * followers stand in for a job (rendezvous.ts) and which shard a job belongs to (shard-map.ts), so
 * every replica must compute it alike without talking. Hand-written: FNV-1a is a few lines, and the
 * npm packages for it are unmaintained.
 */

/** FNV-1a, 32 bits, with murmur3's final avalanche so keys that differ in their last characters spread. */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
