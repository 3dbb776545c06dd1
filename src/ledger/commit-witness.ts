/**
 * What a replica saw the ledger commit, remembered outside the ledger so the ledger can be held to
 * it: a failover to a standby that had not received the newest commits (asynchronous replication,
 * the assumption the drill's --ledger-async breaks on purpose) takes back writes every replica saw
 * commit, and nothing in the ledger itself says so. Each claim is a commit the replica saw, so it
 * keeps the newest claim of each second of the ledger's clock (a later one of the second replaces
 * it) for the last 30 seconds of claims, and its heartbeat asks the ledger whether it still has each
 * (members.ts, findLostClaims). Lost commits are the newest ones before the failover, and claims
 * made after it land in later stretches, so the last claim before it stays remembered until a
 * heartbeat reaches the new primary. A replica that stops claiming keeps its last ones, which the
 * heartbeat stops asking about once they are an hour old (retention deletes runs a day old at the
 * earliest).
 */

/** A claim as the witness remembers it: the attempt row it wrote, and the run it claimed. */
export interface WitnessedClaim {
  runId: bigint;
  attempt: number;
  token: bigint;
  job: string;
  scheduledAt: Date;
  /** When it committed (the ledger's clock). */
  claimedAt: Date;
}

export interface CommitWitnessOptions {
  /** One claim kept per stretch this long (ledger clock). Default 1 s (a promotion takes longer). */
  stretchMs?: number;
  /** Stretches kept behind the newest. Default 30: claims resumed on a new primary keep the last lost one for 30 s. */
  stretches?: number;
}

export class CommitWitness {
  private readonly stretchMs: number;
  private readonly stretches: number;
  private readonly byStretch = new Map<number, WitnessedClaim>();
  private newest = -Infinity;

  constructor(o: CommitWitnessOptions = {}) {
    this.stretchMs = o.stretchMs ?? 1000;
    this.stretches = o.stretches ?? 30;
  }

  /** A claim committed at `claimedAt` (the ledger's clock, as the claim returned it). */
  saw(claim: Omit<WitnessedClaim, 'claimedAt'>, claimedAt: Date): void {
    const stretch = Math.floor(claimedAt.getTime() / this.stretchMs);
    const kept = this.byStretch.get(stretch);
    if (!kept || claim.token > kept.token) {
      const { runId, attempt, token, job, scheduledAt } = claim; // not the claim's payload
      this.byStretch.set(stretch, { runId, attempt, token, job, scheduledAt, claimedAt });
    }
    if (stretch > this.newest) {
      this.newest = stretch;
      for (const s of this.byStretch.keys()) if (s <= stretch - this.stretches) this.byStretch.delete(s);
    }
  }

  /** The claims remembered now, oldest first. */
  recent(): WitnessedClaim[] {
    return [...this.byStretch.entries()].sort(([a], [b]) => a - b).map(([, c]) => c);
  }

  /** Stop asking about these (reported lost once is enough). */
  forget(claims: readonly Pick<WitnessedClaim, 'runId' | 'attempt'>[]): void {
    const gone = new Set(claims.map((c) => `${c.runId}/${c.attempt}`));
    for (const [s, c] of this.byStretch) if (gone.has(`${c.runId}/${c.attempt}`)) this.byStretch.delete(s);
  }
}
