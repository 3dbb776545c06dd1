/**
 * Claims on a real ledger, for tests: runs claimed by id (claimAll), or committed and claimed in
 * one go (claimedRuns: `n` fires of `job` a second apart from the fixture's moving slot).
 */
import assert from 'node:assert/strict';
import type { Ledger } from '../../src/ledger/ledger.js';
import type { Claim } from '../../src/ledger/run-ledger.js';

/** Claim runs `ids` for `worker`; each must be claimed. */
export async function claimAll(ledger: Ledger, ids: bigint[], worker = 'w1'): Promise<Claim[]> {
  return (await ledger.runs.claimMany(ids, worker)).map((r) => {
    assert.equal(r.status, 'claimed', `run not claimed: ${r.status}`);
    return (r as { claim: Claim }).claim;
  });
}

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
    return claimAll(
      ledger,
      committed.map((f) => f.runId),
      o.worker,
    );
  };
}
