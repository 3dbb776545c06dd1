/**
 * Runs committed and claimed in one go, for tests that need claims on a real ledger: `n` fires of
 * `job` a second apart from the fixture's moving slot, claimed by `worker`.
 */
import type { Ledger } from '../../src/ledger/ledger.js';
import type { Claim } from '../../src/ledger/run-ledger.js';

export function claimedRuns(
  ledger: Ledger,
  o: { job: string; worker?: string; start?: number },
): (n: number) => Promise<Claim[]> {
  const stamp = { fenceResource: `scheduler/${o.job}`, token: 1n, replicaId: 'test', stillLeading: () => true };
  let slot = o.start ?? Date.UTC(2026, 0, 1);
  return async (n) => {
    const fires = Array.from({ length: n }, () => ({
      job: o.job,
      scheduledAt: new Date((slot += 1000)),
      trigger: 'schedule' as const,
    }));
    const { committed } = await ledger.fires.commitFires(fires, stamp);
    const results = await ledger.runs.claimMany(
      committed.map((f) => f.runId),
      o.worker ?? 'w1',
    );
    return results.map((r) => {
      if (r.status !== 'claimed') throw new Error(`run not claimed: ${r.status}`);
      return r.claim;
    });
  };
}
