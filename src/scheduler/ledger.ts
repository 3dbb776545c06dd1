/**
 * The ledger: every decision that must hold across replicas is one PostgreSQL statement or
 * transaction here. Queries are hand-written SQL over the drizzle schema (src/db/schema.ts) because
 * each is a conditional upsert whose exact WHERE clause is the point (graphile-worker style:
 * "only the writer that advances the row goes on").
 */
import pg from 'pg';
import { StaleTokenError } from '../errors.js';

export type FireTrigger = 'schedule' | 'catchup' | 'manual';

export interface FireRequest {
  job: string;
  scheduledAt: Date;
  trigger: FireTrigger;
  /** 'pending' for a normal fire; 'skipped' records a fire the overlap or pause policy dropped. */
  state?: 'pending' | 'skipped';
  /** Hold delivery (overlap 'queue'): committed, but the outbox leaves it until the job is idle. */
  hold?: boolean;
  /**
   * Overlap 'replace': if this fire is inserted, the job's other active runs are cancelled in the
   * same transaction, after the fence accepted the leader's token (a stale leader cancels nothing).
   */
  replace?: boolean;
  error?: string;
}

export interface CommittedFire {
  runId: bigint;
  job: string;
  scheduledAt: Date;
  trigger: FireTrigger;
  state: 'pending' | 'skipped';
  hold: boolean;
}

export interface FireBatchResult {
  committed: CommittedFire[];
  /** Fires refused by the unique (job, scheduled_at) key: someone already committed them. */
  duplicates: number;
  /** Runs cancelled in this commit for overlap 'replace'; tell their workers only after COMMIT. */
  cancelled: bigint[];
}

export interface Claim {
  runId: bigint;
  job: string;
  scheduledAt: Date;
  attempt: number;
  token: bigint;
}

export type ClaimResult = { status: 'claimed'; claim: Claim } | { status: 'finished'; state: string };

export type Outcome = 'completed' | 'failed' | 'retrying' | 'cancelled';

export type Queryable = Pick<pg.Pool, 'query'> | pg.PoolClient;

const ACTIVE_STATES = `('pending', 'running', 'retrying')`;

export class Ledger {
  private identityValue: Promise<string> | undefined;

  constructor(readonly pool: pg.Pool) {}

  /** This ledger's random identity (cw_ledger), made by the migration that created it. */
  identity(): Promise<string> {
    this.identityValue ??= this.pool.query<{ id: string }>('SELECT id FROM cw_ledger ORDER BY created_at LIMIT 1').then((r) => {
      const id = r.rows[0]?.id;
      if (!id) throw new Error('cw_ledger has no row: run `cronwarden migrate`');
      return id;
    });
    this.identityValue.catch(() => (this.identityValue = undefined));
    return this.identityValue;
  }

  /**
   * Advance `resource`'s fence to `token` unless a higher token was already accepted.
   * Equal tokens pass: one holder writes many times under one token.
   */
  async advanceFence(resource: string, token: bigint, db: Queryable = this.pool): Promise<void> {
    const res = await db.query(
      `INSERT INTO cw_fences (resource, token) VALUES ($1, $2)
       ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
       WHERE cw_fences.token <= EXCLUDED.token
       RETURNING token`,
      [resource, token.toString()],
    );
    if (res.rowCount === 0) throw new StaleTokenError(resource, token, await this.fenceToken(resource, db));
  }

  /** The database server's clock, epoch ms: the time every replica schedules against. */
  async serverTime(): Promise<number> {
    const res = await this.pool.query<{ t: number }>('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS t');
    return res.rows[0]!.t;
  }

  async fenceToken(resource: string, db: Queryable = this.pool): Promise<bigint | null> {
    const res = await db.query<{ token: string }>('SELECT token FROM cw_fences WHERE resource = $1', [resource]);
    return res.rows[0] ? BigInt(res.rows[0].token) : null;
  }

  /**
   * Commit a batch of fires in one transaction: advance the leader's fence (a stale leader is
   * refused here, not by luck), then insert each run with the unique (job, scheduled_at) key.
   * For each inserted fire marked `replace`, the job's other active runs are cancelled in the same
   * transaction (so only a leader the fence accepted can cancel, and only with a fire that is
   * really new); their ids are returned in `cancelled`.
   * `stillLeading` is checked after the writes and just before COMMIT: past the local deadline
   * we roll back instead of committing (and nothing is cancelled).
   */
  async commitFires(
    fires: FireRequest[],
    leader: { fenceResource: string; token: bigint; replicaId: string; stillLeading: () => boolean },
  ): Promise<FireBatchResult> {
    if (fires.length === 0) return { committed: [], duplicates: 0, cancelled: [] };
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      await this.advanceFence(leader.fenceResource, leader.token, client);
      const res = await client.query<{ id: string; job: string; scheduled_at: Date; trigger: FireTrigger; state: 'pending' | 'skipped' }>(
        `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state, enqueued_at, finished_at, error)
         SELECT f.job, f.scheduled_at, f.trigger, $2, $3, f.state,
                CASE WHEN f.state = 'skipped' THEN now() END,
                CASE WHEN f.state = 'skipped' THEN now() END,
                f.error
         FROM jsonb_to_recordset($1::jsonb) AS f(job text, scheduled_at timestamptz, trigger text, state text, error text)
         ON CONFLICT (job, scheduled_at) WHERE trigger <> 'manual' DO NOTHING
         RETURNING id, job, scheduled_at, trigger, state`,
        [
          JSON.stringify(
            fires.map((f) => ({
              job: f.job,
              scheduled_at: f.scheduledAt.toISOString(),
              trigger: f.trigger,
              state: f.state ?? 'pending',
              error: f.error ?? null,
            })),
          ),
          leader.token.toString(),
          leader.replicaId,
        ],
      );
      const inserted = new Set(res.rows.map((r) => `${r.job}@${r.scheduled_at.getTime()}`));
      const replacedBy = new Map<string, Date>(); // job → its newest inserted 'replace' fire
      for (const f of fires) {
        if (!f.replace || !inserted.has(`${f.job}@${f.scheduledAt.getTime()}`)) continue;
        const prev = replacedBy.get(f.job);
        if (!prev || prev < f.scheduledAt) replacedBy.set(f.job, f.scheduledAt);
      }
      const keep = res.rows.map((r) => BigInt(r.id));
      const cancelled: bigint[] = [];
      for (const [job, at] of replacedBy) {
        cancelled.push(...(await this.cancelActive(job, `replaced by the fire of ${at.toISOString()}`, client, keep)));
      }
      await client.query(
        `INSERT INTO cw_job_state (job, last_scheduled_at)
         SELECT job, max(scheduled_at) FROM jsonb_to_recordset($1::jsonb) AS f(job text, scheduled_at timestamptz) GROUP BY job
         ON CONFLICT (job) DO UPDATE SET last_scheduled_at = GREATEST(cw_job_state.last_scheduled_at, EXCLUDED.last_scheduled_at), updated_at = now()`,
        [JSON.stringify(fires.filter((f) => f.trigger !== 'manual').map((f) => ({ job: f.job, scheduled_at: f.scheduledAt.toISOString() })))],
      );
      if (!leader.stillLeading()) {
        await client.query('ROLLBACK');
        return { committed: [], duplicates: 0, cancelled: [] };
      }
      await client.query('COMMIT');
      const holdFor = new Set(fires.filter((f) => f.hold).map((f) => `${f.job}@${f.scheduledAt.getTime()}`));
      return {
        committed: res.rows.map((r) => ({
          runId: BigInt(r.id),
          job: r.job,
          scheduledAt: r.scheduled_at,
          trigger: r.trigger,
          state: r.state,
          hold: holdFor.has(`${r.job}@${r.scheduled_at.getTime()}`),
        })),
        duplicates: fires.length - res.rows.length,
        cancelled,
      };
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  }

  async markEnqueued(runIds: bigint[]): Promise<void> {
    if (runIds.length === 0) return;
    await this.pool.query('UPDATE cw_runs SET enqueued_at = now() WHERE id = ANY($1::bigint[]) AND enqueued_at IS NULL', [
      runIds.map(String),
    ]);
  }

  /**
   * The outbox: committed runs not yet handed to the queue. A run of an overlap-'queue' job waits
   * here while an earlier run of its job is still active.
   */
  async unenqueued(limit: number, queuedJobs: string[]): Promise<CommittedFire[]> {
    const res = await this.pool.query<{ id: string; job: string; scheduled_at: Date; trigger: FireTrigger }>(
      `SELECT r.id, r.job, r.scheduled_at, r.trigger FROM cw_runs r
       WHERE r.enqueued_at IS NULL AND r.state = 'pending'
         AND NOT (r.job = ANY($2::text[]) AND EXISTS (
           SELECT 1 FROM cw_runs a WHERE a.job = r.job AND a.id <> r.id AND a.enqueued_at IS NOT NULL
             AND a.state IN ${ACTIVE_STATES}))
       ORDER BY r.created_at, r.id LIMIT $1`,
      [limit, queuedJobs],
    );
    return res.rows.map((r) => ({ runId: BigInt(r.id), job: r.job, scheduledAt: r.scheduled_at, trigger: r.trigger, state: 'pending', hold: false }));
  }

  /** Latest scheduled (not manual) fire per job, for reconciliation after an election. */
  async lastFired(): Promise<Map<string, Date>> {
    const res = await this.pool.query<{ job: string; last_scheduled_at: Date }>(
      'SELECT job, last_scheduled_at FROM cw_job_state WHERE last_scheduled_at IS NOT NULL',
    );
    return new Map(res.rows.map((r) => [r.job, r.last_scheduled_at]));
  }

  async pausedJobs(): Promise<Set<string>> {
    const res = await this.pool.query<{ job: string }>('SELECT job FROM cw_job_state WHERE paused');
    return new Set(res.rows.map((r) => r.job));
  }

  async setPaused(job: string, paused: boolean): Promise<void> {
    await this.pool.query(
      `INSERT INTO cw_job_state (job, paused) VALUES ($1, $2)
       ON CONFLICT (job) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()`,
      [job, paused],
    );
  }

  /** Active runs (pending, running, retrying) of the given jobs, and how many wait undelivered. */
  async activeJobs(jobs: string[]): Promise<Map<string, { ids: bigint[]; held: number }>> {
    if (jobs.length === 0) return new Map();
    const res = await this.pool.query<{ job: string; ids: string[]; held: number }>(
      `SELECT job, array_agg(id::text) AS ids, (count(*) FILTER (WHERE enqueued_at IS NULL))::int AS held
       FROM cw_runs WHERE job = ANY($1::text[]) AND state IN ${ACTIVE_STATES} GROUP BY job`,
      [jobs],
    );
    return new Map(res.rows.map((r) => [r.job, { ids: r.ids.map((id) => BigInt(id)), held: r.held }]));
  }

  /**
   * Claim a run for one attempt. The execution token comes from a sequence, so it is higher than
   * every earlier claim of any run. A run that is already finished is not claimed: the delivery is
   * counted as a skipped attempt (a re-delivery after the work was done) and its state returned.
   */
  async claim(runId: bigint, worker: string): Promise<ClaimResult> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      const res = await client.query<{ job: string; scheduled_at: Date; attempts: number; claim_token: string }>(
        `UPDATE cw_runs SET claim_token = nextval('cw_execution_token_seq'), attempts = attempts + 1,
           state = 'running', started_at = COALESCE(started_at, now())
         WHERE id = $1 AND state IN ${ACTIVE_STATES}
         RETURNING job, scheduled_at, attempts, claim_token`,
        [runId.toString()],
      );
      const row = res.rows[0];
      if (!row) {
        // A delivery of a run that is already finished: record it as a skipped attempt (numbered
        // after every earlier one), so the admin view and the metrics show re-deliveries.
        const done = await client.query<{ state: string; n: number }>(
          `UPDATE cw_runs SET skipped_attempts = skipped_attempts + 1 WHERE id = $1
           RETURNING state, attempts + skipped_attempts AS n`,
          [runId.toString()],
        );
        const skipped = done.rows[0];
        if (skipped) {
          await client.query(
            `INSERT INTO cw_run_attempts (run_id, attempt, token, worker, state, finished_at, error)
             VALUES ($1, $2, nextval('cw_execution_token_seq'), $3, 'skipped', now(), $4)`,
            [runId.toString(), skipped.n, worker, `run already ${skipped.state}`],
          );
        }
        await client.query('COMMIT');
        return { status: 'finished', state: skipped?.state ?? 'unknown' };
      }
      await client.query(
        `INSERT INTO cw_run_attempts (run_id, attempt, token, worker, state) VALUES ($1, $2, $3, $4, 'running')`,
        [runId.toString(), row.attempts, row.claim_token, worker],
      );
      await client.query('COMMIT');
      return {
        status: 'claimed',
        claim: { runId, job: row.job, scheduledAt: row.scheduled_at, attempt: row.attempts, token: BigInt(row.claim_token) },
      };
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  }

  /**
   * ctx.fence: refuse unless this attempt still holds the run's newest claim, then advance the
   * resource's fence to the attempt's token (refused if a higher token already wrote it). Inside
   * the handler's own transaction (`db`), the fence row stays locked until it commits, so writes
   * to one resource land in token order. The run row is not locked: a paused attempt must never
   * keep a newer attempt from claiming the run.
   */
  async fenceRun(resource: string, claim: Claim, db: Queryable = this.pool): Promise<void> {
    const res = await db.query(
      `WITH mine AS (SELECT 1 FROM cw_runs WHERE id = $3 AND claim_token = $2)
       INSERT INTO cw_fences (resource, token) SELECT $1, $2 WHERE EXISTS (SELECT 1 FROM mine)
       ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
       WHERE cw_fences.token <= EXCLUDED.token
       RETURNING token`,
      [resource, claim.token.toString(), claim.runId.toString()],
    );
    if (res.rowCount === 0) throw new StaleTokenError(resource, claim.token, await this.fenceToken(resource, db));
  }

  /**
   * ctx.transaction: the handler's writes and the run's completion commit together, or not at all.
   * Optimistic, so a paused attempt holds no lock on the run: check first (already completed →
   * 'skipped', fn not called; a newer claim → StaleTokenError), run fn, then complete the run with
   * an UPDATE conditional on this attempt still holding the newest claim. If a newer attempt
   * claimed it meanwhile, that UPDATE matches nothing and everything fn wrote is rolled back.
   */
  async completeInTransaction<T>(
    claim: Claim,
    fn: (tx: pg.PoolClient) => Promise<T>,
  ): Promise<{ status: 'committed'; value: T } | { status: 'skipped' }> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      const res = await client.query<{ state: string; claim_token: string | null }>(
        'SELECT state, claim_token FROM cw_runs WHERE id = $1',
        [claim.runId.toString()],
      );
      const row = res.rows[0];
      if (!row || row.state === 'completed') {
        await client.query('ROLLBACK');
        await this.recordSkippedAttempt(claim, 'run already completed by an earlier attempt');
        return { status: 'skipped' };
      }
      if (row.claim_token !== claim.token.toString()) {
        await client.query('ROLLBACK');
        throw new StaleTokenError(`run ${claim.runId}`, claim.token, row.claim_token === null ? null : BigInt(row.claim_token));
      }
      const value = await fn(client);
      const done = await this.finish(claim, 'completed', undefined, client);
      if (!done) {
        await client.query('ROLLBACK');
        const now = await this.runState(claim.runId);
        if (now?.state === 'completed') {
          await this.recordSkippedAttempt(claim, 'a newer attempt completed the run first; this attempt rolled back');
          throw new StaleTokenError(`run ${claim.runId}`, claim.token, now.claimToken);
        }
        throw new StaleTokenError(`run ${claim.runId}`, claim.token, now?.claimToken ?? null);
      }
      await client.query('COMMIT');
      return { status: 'committed', value };
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  }

  /**
   * Record an attempt's outcome. Refused (false) when a newer attempt has claimed the run since, or
   * the run is already finished: a stale attempt can never overwrite a newer attempt's record.
   */
  async finish(claim: Claim, outcome: Outcome, error?: string, db: Queryable = this.pool): Promise<boolean> {
    const runState = outcome;
    const res = await db.query(
      `UPDATE cw_runs SET state = $3,
         finished_at = CASE WHEN $3 = 'retrying' THEN NULL ELSE now() END,
         completed_attempt = CASE WHEN $3 = 'completed' THEN $4::int ELSE completed_attempt END,
         error = $5
       WHERE id = $1 AND claim_token = $2 AND state IN ${ACTIVE_STATES}`,
      [claim.runId.toString(), claim.token.toString(), runState, claim.attempt, error ?? null],
    );
    const accepted = res.rowCount === 1;
    await db.query(
      `UPDATE cw_run_attempts SET state = $3, finished_at = now(), error = $4 WHERE run_id = $1 AND attempt = $2`,
      [claim.runId.toString(), claim.attempt, accepted ? outcome : 'stale', error ?? null],
    );
    return accepted;
  }

  /** Record that this attempt found its run already completed and did nothing. */
  async recordSkippedAttempt(claim: Claim, reason: string): Promise<void> {
    await this.pool.query(
      `UPDATE cw_run_attempts SET state = 'skipped', finished_at = now(), error = $3 WHERE run_id = $1 AND attempt = $2`,
      [claim.runId.toString(), claim.attempt, reason],
    );
    await this.pool.query('UPDATE cw_runs SET skipped_attempts = skipped_attempts + 1 WHERE id = $1', [claim.runId.toString()]);
  }

  /**
   * Mark active runs of a job cancelled, except `keep`; returns the run ids. Overlap 'replace'
   * calls it only inside commitFires, after the fence: never call it outside a fenced transaction.
   */
  private async cancelActive(job: string, reason: string, db: Queryable = this.pool, keep: bigint[] = []): Promise<bigint[]> {
    const res = await db.query<{ id: string }>(
      `UPDATE cw_runs SET state = 'cancelled', finished_at = now(), error = $2
       WHERE job = $1 AND state IN ${ACTIVE_STATES} AND id <> ALL($3::bigint[]) RETURNING id`,
      [job, reason, keep.map(String)],
    );
    return res.rows.map((r) => BigInt(r.id));
  }

  async runState(runId: bigint): Promise<{ state: string; claimToken: bigint | null } | null> {
    const res = await this.pool.query<{ state: string; claim_token: string | null }>(
      'SELECT state, claim_token FROM cw_runs WHERE id = $1',
      [runId.toString()],
    );
    const row = res.rows[0];
    return row ? { state: row.state, claimToken: row.claim_token === null ? null : BigInt(row.claim_token) } : null;
  }

  /**
   * Retention: delete up to `batch` finished runs (completed, failed, skipped, cancelled) created
   * more than `olderThanMs` ago, with their attempts (ON DELETE CASCADE). Returns how many went.
   * Safe for the schedule: reconciliation after an election reads cw_job_state, not old runs, so
   * a deleted run's instant is never fired again.
   */
  async pruneFinishedRuns(olderThanMs: number, batch: number): Promise<number> {
    const res = await this.pool.query(
      `DELETE FROM cw_runs WHERE id IN (
         SELECT id FROM cw_runs
         WHERE state IN ('completed', 'failed', 'skipped', 'cancelled') AND created_at < now() - $1::bigint * interval '1 millisecond'
         LIMIT $2)`,
      [Math.floor(olderThanMs), batch],
    );
    return res.rowCount ?? 0;
  }

  async recordElection(leaseName: string, leader: string, token: bigint, backend: string): Promise<void> {
    await this.pool.query('INSERT INTO cw_elections (lease_name, leader, token, backend) VALUES ($1, $2, $3, $4)', [
      leaseName,
      leader,
      token.toString(),
      backend,
    ]);
  }
}
