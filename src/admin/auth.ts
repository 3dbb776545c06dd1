import { createHash, timingSafeEqual } from 'node:crypto';

/**
 * Bearer-token check in constant time: both sides are hashed to 32 bytes first, so the comparison
 * neither leaks the token's length nor throws on a length mismatch.
 */
export function bearerMatches(header: string | undefined, token: string | undefined): boolean {
  if (!token || !header) return false;
  const match = /^Bearer\s+(.+)$/i.exec(header.trim());
  if (!match) return false;
  const a = createHash('sha256').update(match[1]!).digest();
  const b = createHash('sha256').update(token).digest();
  return timingSafeEqual(a, b);
}
