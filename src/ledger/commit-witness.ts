/**
 * What a replica saw the ledger commit, remembered outside the ledger so the ledger can be held to
 * it: a failover to a standby that had not received the newest commits (asynchronous replication,
 * the assumption the drill's --ledger-async breaks on purpose) takes back writes every replica saw
 * commit, and nothing in the ledger itself says so. Each claim and each outcome is a commit the
 * replica saw, so it keeps the newest claim and the newest outcome of each second of the ledger's
 * clock for the last 30 seconds of claims, and its heartbeat asks the ledger whether it still has each
 * (members.ts, findLostClaims). Lost commits are the newest ones before the failover, and claims
 * made after it land in later stretches, so the last claim before it stays remembered until a
 * heartbeat reaches the new primary. A replica that stops claiming keeps its last ones, which the
 * heartbeat stops asking about once they are an hour old (retention deletes runs a day old at the
 * earliest).
 */

/**
 * A claim as the witness remembers it: the attempt row it wrote, and the run it claimed; or, with
 * `finished`, the outcome of an attempt (its attempt row finished), whose run's job and instant
 * the outcome did not carry.
 */
export interface WitnessedClaim {
  runId: bigint;
  attempt: number;
  token: bigint;
  job: string | null;
  scheduledAt: Date | null;
  /** When it committed (the ledger's clock; for an outcome, the newest claim's before it). */
  claimedAt: Date;
  /** An outcome recorded (completed, failed, retrying…), not a claim. */
  finished?: boolean;
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
  private lastClaimAt: Date | undefined;

  constructor(o: CommitWitnessOptions = {}) {
    this.stretchMs = o.stretchMs ?? 1000;
    this.stretches = o.stretches ?? 30;
  }

  /** A claim committed at `claimedAt` (the ledger's clock, as the claim returned it). */
  saw(claim: Omit<WitnessedClaim, 'claimedAt' | 'finished'>, claimedAt: Date): void {
    const { runId, attempt, token, job, scheduledAt } = claim; // not the claim's payload
    this.keep(Math.floor(claimedAt.getTime() / this.stretchMs), { runId, attempt, token, job, scheduledAt, claimedAt });
    this.lastClaimAt = claimedAt;
  }

  /**
   * An attempt's outcome committed (a completion can be lost while its claim survived). Its time is
   * the newest claim's: outcomes return none, and claims go on beside them.
   */
  finished(a: Pick<WitnessedClaim, 'runId' | 'attempt' | 'token'>): void {
    const at = this.lastClaimAt;
    if (!at) return;
    const { runId, attempt, token } = a;
    this.keep(Math.floor(at.getTime() / this.stretchMs), {
      runId,
      attempt,
      token,
      job: null,
      scheduledAt: null,
      claimedAt: at,
      finished: true,
    });
  }

  /** Keep `w` as its stretch's claim or outcome (the newer of each), and drop stretches too old. */
  private keep(stretch: number, w: WitnessedClaim): void {
    const key = 2 * stretch + (w.finished ? 1 : 0);
    const kept = this.byStretch.get(key);
    if (!kept || w.token >= kept.token) this.byStretch.set(key, w);
    if (stretch > this.newest) {
      this.newest = stretch;
      for (const k of this.byStretch.keys())
        if (Math.floor(k / 2) <= stretch - this.stretches) this.byStretch.delete(k);
    }
  }

  /** The claims remembered now, oldest first. */
  recent(): WitnessedClaim[] {
    return [...this.byStretch.entries()].sort(([a], [b]) => a - b).map(([, c]) => c);
  }

  /** Stop asking about these (reported lost once is enough). */
  forget(claims: readonly Pick<WitnessedClaim, 'runId' | 'attempt' | 'finished'>[]): void {
    const id = (c: Pick<WitnessedClaim, 'runId' | 'attempt' | 'finished'>) =>
      `${c.runId}/${c.attempt}/${c.finished === true}`;
    const gone = new Set(claims.map(id));
    for (const [k, c] of this.byStretch) if (gone.has(id(c))) this.byStretch.delete(k);
  }
}
