/**
 * ctx.transaction: a handler's writes and its run's completion commit together, or not at all.
 *
 * Alone (`commitOne`): BEGIN with the check (already completed: 'skipped', fn not called; a newer
 * claim: StaleTokenError), fn, then the completion conditional on this attempt still holding the
 * newest claim, sent with COMMIT. Optimistic: a paused attempt holds no lock on its run.
 *
 * Grouped (`commitGroup`, group commit): several runs' callbacks in one transaction, one after the
 * other on one connection, one token-checked completion for all, one COMMIT. Any error, or any
 * refused completion, rolls the whole group back and each run is redone alone, so each run's effect
 * is still atomic with its own completion. A callback can therefore be called twice (its first call
 * rolled back): everything it does must be inside `tx`. A callback may also end its group
 * (GroupItem.goOn): the callbacks run so far commit, and the rest are redone alone, so a slow one
 * does not make every later one wait for it.
 *
 * Pipelined (`ctx.transaction(fn, { pipelined: true })`): a group of such callbacks runs them all at
 * once on the connection in pipeline mode, so their statements go out without waiting for each
 * other's answers (a group of 10 one-row INSERTs: one round trip's wait instead of ten). Their
 * statements interleave, so what needs the transaction to itself is refused (pipelined-client.ts):
 * that run fails with PipelinedStatementError, nothing of it committed, and the rest are redone.
 */
import type pg from 'pg';
import { StaleTokenError } from '../errors.js';
import type { Tables } from '../db/tables.js';
import { REFUSED_COMPLETION, completeGroupSql } from './run-finishes.js';
import { sqlIntArray, withTransaction, type Queryable } from './transaction.js';
import { executeByKey, sqlPrepared, type SentSql } from './sql-prepared.js';
import { perSchema } from './named-statement.js';
import { inOneWrite, pipelinedClient } from './pipelined-client.js';

export type TransactionResult<T> = { status: 'committed'; value: T } | { status: 'skipped' };

/** What the check and the completion need of an attempt. */
export interface TransactingAttempt {
  runId: bigint;
  token: bigint;
  attempt: number;
}

export interface GroupItem<T = unknown> {
  claim: TransactingAttempt;
  fn: (tx: pg.PoolClient) => Promise<T>;
  /** The callback may run beside the group's others (see the top of the file); a group is all or none. */
  pipelined?: boolean;
  /**
   * Called once every callback of the group has returned and only the completion and COMMIT are
   * left: the run's handler cannot go on before the group's answer (the worker lends its slot).
   */
  onCallbacksDone?: () => void;
  /**
   * The handler slot this run lent when it called ctx.transaction (the worker's slots were freeing
   * quickly): the group's callbacks run in one such slot, taken back before the first of them and
   * lent again after the last; pipelined callbacks too, all at once in that one slot, since their
   * statements run one at a time on the group's connection. Taken before any callback has written,
   * so waiting for it never waits on a lock of the group's own.
   */
  slot?: LentSlot;
  /**
   * Asked after this run's callback, in a group whose callbacks run in turn: false ends the group
   * there (the callbacks run so far complete and commit; the others come out 'redo', not called).
   */
  goOn?: () => boolean;
}

/** A handler slot lent out while its run waits on its group (src/jobs/slot-loan.ts). */
export interface LentSlot {
  takeBack(): Promise<void>;
  lend(): void;
}

/**
 * One item's result: its TransactionResult; or the error its own transaction ended with; or
 * 'redo': the group rolled back (another run's callback failed, a completion was refused, the
 * COMMIT's outcome is unknown) and this run's callback must be run again in a transaction of its
 * own, whose check then finds what did commit.
 */
export type GroupOutcome<T = unknown> =
  { kind: 'done'; result: TransactionResult<T> } | { kind: 'failed'; error: unknown } | { kind: 'redo' };

type RunRow = { id: string; state: string; claim_token: string | null };

/** ctx.transaction for one run in a transaction of its own. */
export async function commitOne<T>(
  pool: pg.Pool,
  t: Tables,
  claim: TransactingAttempt,
  fn: (tx: pg.PoolClient) => Promise<T>,
): Promise<TransactionResult<T>> {
  const result = await commitOneThen(pool, t, claim, fn, async (client, _value, commitWith) =>
    (await completeAndCommit(t, [claim], commitWith)) ? true : null,
  );
  return result.status === 'committed' ? { status: 'committed', value: result.value } : result;
}

/**
 * ctx.transaction with the caller's completion: the check, `fn`, then `complete` inside the same
 * transaction (it may send its last statement with COMMIT through `commitWith`); `complete`
 * answering null refuses the attempt (a newer claim holds the run): everything rolls back and
 * StaleTokenError goes out, after recording the attempt skipped if a newer one completed the run.
 */
export async function commitOneThen<T, R>(
  pool: pg.Pool,
  t: Tables,
  claim: TransactingAttempt,
  fn: (tx: pg.PoolClient) => Promise<T>,
  complete: (client: pg.PoolClient, value: T, commitWith: (sql: SentSql) => Promise<unknown>) => Promise<R | null>,
): Promise<{ status: 'committed'; value: T; completed: R } | { status: 'skipped' }> {
  return withTransaction(
    pool,
    async (client, rollback, { opened, commitWith }) => {
      const row = (opened?.rows as RunRow[] | undefined)?.[0];
      if (!row || row.state === 'completed') {
        await rollback();
        return { status: 'skipped' as const };
      }
      const newest = row.claim_token === null ? null : BigInt(row.claim_token);
      if (newest !== claim.token) throw new StaleTokenError(`run ${claim.runId}`, claim.token, newest);
      const value = await fn(client);
      const completed = await complete(client, value, commitWith);
      if (completed !== null) return { status: 'committed' as const, value, completed };
      await rollback();
      const now = await pool.query<RunRow>(`SELECT id, state, claim_token FROM ${t.runs} WHERE id = $1`, [
        claim.runId.toString(),
      ]);
      const after = now.rows[0];
      if (after?.state === 'completed')
        await recordSkippedAttempt(pool, t, claim, 'a newer attempt completed the run first; this attempt rolled back');
      throw new StaleTokenError(
        `run ${claim.runId}`,
        claim.token,
        after?.claim_token == null ? null : BigInt(after.claim_token),
      );
    },
    checkStatement(t, [claim]), // BEGIN and the check in one round trip
  );
}

/**
 * ctx.transaction for several runs in one transaction (see the top of the file). Every run of a
 * group that rolled back comes out 'redo', for the caller to run alone (with commitOne) once its
 * handler may run code again.
 */
export async function commitGroup(pool: pg.Pool, t: Tables, items: readonly GroupItem[]): Promise<GroupOutcome[]> {
  const outcomes = new Array<GroupOutcome | undefined>(items.length);
  const going: number[] = [];
  const pipelined = items.every((item) => item.pipelined === true);
  const committed = await withTransaction(
    pool,
    async (client, rollback, { opened, commitWith }): Promise<boolean> => {
      const rows = new Map(((opened?.rows ?? []) as RunRow[]).map((r) => [r.id, r]));
      for (const [i, item] of items.entries()) {
        const row = rows.get(item.claim.runId.toString());
        if (!row || row.state === 'completed') {
          outcomes[i] = { kind: 'done', result: { status: 'skipped' } };
        } else if (row.claim_token === null || BigInt(row.claim_token) !== item.claim.token) {
          const newest = row.claim_token === null ? null : BigInt(row.claim_token);
          outcomes[i] = {
            kind: 'failed',
            error: new StaleTokenError(`run ${item.claim.runId}`, item.claim.token, newest),
          };
        } else going.push(i);
      }
      if (going.length === 0) {
        await rollback();
        return true;
      }
      const ran = pipelined
        ? await callSideBySide(
            client,
            going.map((i) => items[i]!),
          )
        : await callInTurn(
            client,
            going.map((i) => items[i]!),
          );
      if (!ran.ok) {
        // A refused statement fails its own run; the others are redone (below).
        for (const [k, error] of ran.refused) outcomes[going[k]!] = { kind: 'failed', error };
        await rollback().catch(() => undefined);
        return false;
      }
      const { values } = ran;
      // A group ended by a callback (GroupItem.goOn): the runs not called yet are redone alone.
      for (const i of going.splice(values.length)) outcomes[i] = { kind: 'redo' };
      for (const i of going) items[i]!.onCallbacksDone?.();
      // Refused, or any error (a deadlock, a lost connection: an unknown outcome): redo alone,
      // whose check then finds what did commit.
      if (
        !(await completeAndCommit(
          t,
          going.map((i) => items[i]!.claim),
          commitWith,
        ).catch(() => false))
      ) {
        await rollback().catch(() => undefined);
        return false;
      }
      for (const [k, i] of going.entries())
        outcomes[i] = { kind: 'done', result: { status: 'committed', value: values[k] } };
      return true;
    },
    checkStatement(
      t,
      items.map((i) => i.claim),
    ),
    { pipelined },
  );
  // Each run again in a transaction of its own: a run's effect commits only with its own completion.
  if (!committed) for (const i of going) outcomes[i] ??= { kind: 'redo' };
  return outcomes.map((o) => o!);
}

type Called = { ok: true; values: unknown[] } | { ok: false; refused: Map<number, unknown> };

/**
 * The group's callbacks one after another: each sees the transaction as the earlier ones left it.
 * Callbacks of runs that lent their slots run in one of those slots (GroupItem.slot). A callback
 * whose goOn() says no ends the turns: the values are then fewer than the items.
 */
async function callInTurn(client: pg.PoolClient, items: readonly GroupItem[]): Promise<Called> {
  const values: unknown[] = [];
  try {
    await inLentSlot(items, async () => {
      for (const item of items) {
        values.push(await item.fn(client));
        if (item.goOn?.() === false) break;
      }
    });
  } catch {
    return { ok: false, refused: new Map() };
  }
  return { ok: true, values };
}

/** `work` (callbacks of `items`, one after another) in a slot one of them lent (GroupItem.slot), if any. */
export async function inLentSlot<T>(items: readonly GroupItem[], work: () => Promise<T>): Promise<T> {
  const slot = items.find((item) => item.slot)?.slot;
  await slot?.takeBack();
  try {
    return await work();
  } finally {
    slot?.lend();
  }
}

/**
 * The group's pipelined callbacks all at once on one client in pipeline mode, in a slot one of
 * them lent (GroupItem.slot), if any. Every callback is waited for, failed or not, before the group
 * goes on: a ROLLBACK sent while one still runs would leave its later statements outside any
 * transaction. The statements they send as they are called go out in one socket write
 * (inOneWrite).
 */
async function callSideBySide(client: pg.PoolClient, items: readonly GroupItem[]): Promise<Called> {
  const refused = new Map<number, unknown>();
  const settled = await inLentSlot(items, () =>
    Promise.allSettled(
      inOneWrite(client, () =>
        items.map((item, k) => item.fn(pipelinedClient(client, (error) => refused.set(k, error)))),
      ),
    ),
  );
  if (refused.size > 0 || settled.some((s) => s.status === 'rejected')) return { ok: false, refused };
  return { ok: true, values: settled.map((s) => (s as PromiseFulfilledResult<unknown>).value) };
}

/** The check sent with BEGIN: each run's state and newest claim (ids as literals: integers only). */
export function checkStatement(t: Tables, claims: readonly TransactingAttempt[]): SentSql {
  return executeByKey(statements(t).check, [sqlIntArray(claims.map((c) => c.runId))], { thenReset: true }); // the handlers' statements follow
}

const statements = perSchema((t) => ({
  check: sqlPrepared('check_runs', ['bigint[]'], `SELECT id, state, claim_token FROM ${t.runs} WHERE id = ANY($1)`),
}));

/** The group's completion and COMMIT in one round trip; false when any completion was refused. */
async function completeAndCommit(
  t: Tables,
  claims: readonly TransactingAttempt[],
  commitWith: (sql: SentSql) => Promise<unknown>,
): Promise<boolean> {
  try {
    await commitWith(completeGroupSql(t, claims));
    return true;
  } catch (err) {
    if (err instanceof Error && err.message.includes(REFUSED_COMPLETION)) return false;
    throw err;
  }
}

/** Record that this attempt found its run already completed and did nothing. */
export async function recordSkippedAttempt(
  db: Queryable,
  t: Tables,
  claim: TransactingAttempt,
  reason: string,
): Promise<void> {
  await db.query(
    `WITH a AS (UPDATE ${t.runAttempts} SET state = 'skipped', finished_at = now(), error = $3
       WHERE run_id = $1 AND attempt = $2)
     UPDATE ${t.runs} SET skipped_attempts = skipped_attempts + 1 WHERE id = $1`,
    [claim.runId.toString(), claim.attempt, reason],
  );
}
