/** Fault kinds the drill can strike, and a seeded schedule of them. */
export const faultKinds = [
  'kill', // SIGKILL of the leader
  'stop', // SIGSTOP of the leader past the TTL, then SIGCONT: the stale leader
  'term', // SIGTERM of the leader: graceful hand-over
  'backend-restart', // kill -9 and restart of the backend (one member of etcd's three)
  'backend-restart-all', // every etcd member at once
  'link-cut', // partition between the leader and the backend, past the TTL
  'link-slow', // 75 ± 50 ms each way on the leader's link: must not flap
  'link-lossy', // lost segments (a retransmission timeout each) on the leader's link: must not flap
  'clock-skew', // the leader's wall clock minutes ahead, then minutes behind
] as const;
export type FaultKind = (typeof faultKinds)[number];

/** Faults after which leadership must stay where it is. */
export const keepsLeader: ReadonlySet<FaultKind> = new Set(['link-slow', 'link-lossy', 'clock-skew']);

/** Every kind that means something on `backend`; clock-skew only where libfaketime is installed. */
export function applicableFaults(backend: 'etcd' | 'redis' | 'postgres', hasLibfaketime: boolean): FaultKind[] {
  return faultKinds.filter((k) => (k !== 'backend-restart-all' || backend === 'etcd') && (k !== 'clock-skew' || hasLibfaketime));
}

/**
 * A small seeded PRNG (mulberry32), so a failing drill replays with --seed. Hand-written: ten
 * lines, and the drill needs nothing more than a reproducible stream of floats.
 */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * `count` faults (at least one of each chosen kind) in a seeded order: every kind equally often,
 * the remainder picked at random, so a long drill gives each kind enough samples.
 */
export function faultSchedule(kinds: FaultKind[], count: number, random: () => number): FaultKind[] {
  const total = Math.max(count, kinds.length);
  const out: FaultKind[] = [];
  for (let round = 0; round < Math.floor(total / kinds.length); round++) out.push(...kinds);
  while (out.length < total) out.push(kinds[Math.floor(random() * kinds.length)]!);
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
