/**
 * Outcomes: many attempts' outcomes recorded in one statement, each conditional on its attempt
 * still holding the run's newest claim and the run being active, so a stale attempt can never
 * overwrite what a newer one recorded. The run changes and its attempt row is written together.
 */
import type { Tables } from '../db/tables.js';
import { storedError } from './stored-text.js';
import { ACTIVE_SQL, OPEN_RUNS_KEPT_SETTING } from './run-states.js';
import { UNKNOWN_WORKER, settleOldClaimRows, writeOwnEndedAttempts } from './attempt-rows.js';
import { perSchema } from './named-statement.js';
import type pg from 'pg';
import { sqlBoolArray, sqlIntArray, sqlTextArray } from './transaction.js';
import { executeByKey, sqlPrepared, type KeyedExecute, type SentSql } from './sql-prepared.js';

export type Outcome = 'completed' | 'failed' | 'retrying' | 'cancelled' | 'superseded';

/** What one attempt asks to record. */
export interface FinishRequest {
  runId: bigint;
  /** The attempt's execution token: the record is refused unless it is still the run's newest. */
  token: bigint;
  attempt: number;
  outcome: Outcome;
  /** A reason, or what the handler threw; stored bounded and sanitised. */
  error?: unknown;
  /** The handler failed this attempt (counted against the job's retries; a hand-back is not). */
  failure?: boolean;
  /** 'retrying': the run is not claimed again before this many ms from now (its backoff). */
  retryInMs?: number;
}

/**
 * The statement recording each request's outcome (acceptedInOrder reads its answer). The UPDATE
 * locks its rows as it meets them (in the sorted input's order when it finds each run by its key,
 * in the table's when it scans it), with no `FOR UPDATE` before it: that wrote a second row lock a
 * run into the WAL (and with it gone, the attempts' foreign key check did, until 0022 dropped the
 * key: together 54 B of the run's 1,042). Two batches that share runs are a retry of an outcome
 * beside the original still running; should they meet in opposite orders anyway, PostgreSQL's
 * deadlock check fails one, an error its caller answers as any ledger error (a group is redone run
 * by run; a run whose outcome could not be recorded is delivered again, and its claimer may claim
 * it again).
 */
export function finishStatement(t: Tables, requests: readonly FinishRequest[]): KeyedExecute {
  const errors = requests.map((r) => (r.error === undefined ? null : storedError(r.error)));
  return {
    s: statements(t).finish,
    args: [
      sqlIntArray(requests.map((r) => r.runId)),
      sqlIntArray(requests.map((r) => r.token)),
      sqlTextArray(requests.map((r) => r.outcome)),
      sqlIntArray(requests.map((r) => r.attempt)),
      sqlTextArray(errors.map((e) => e?.message ?? null)),
      sqlTextArray(errors.map((e) => e?.stack ?? null)),
      sqlIntArray(requests.map((r) => (r.retryInMs === undefined ? null : Math.max(0, Math.round(r.retryInMs))))),
      sqlBoolArray(requests.map((r) => r.failure === true)),
    ],
  };
}

/**
 * The statement that completes a group of runs inside their handlers' transaction, refusing the
 * whole transaction when any completion is refused: it then raises REFUSED_COMPLETION, which
 * aborts the transaction so COMMIT cannot commit the handlers' writes. An EXECUTE of a statement
 * prepared on the connection, with the ids, tokens and attempts as literals (integers only), so it
 * is sent with COMMIT in one simple-protocol round trip (sql-prepared.ts).
 */
export function completeGroupSql(
  t: Tables,
  runs: readonly { runId: bigint; token: bigint; attempt: number }[],
): SentSql {
  return executeByKey(
    statements(t).completeGroup,
    [
      sqlIntArray(runs.map((r) => r.runId)),
      sqlIntArray(runs.map((r) => r.token)),
      sqlIntArray(runs.map((r) => r.attempt)),
    ],
    { thenReset: false }, // COMMIT follows
  );
}

/**
 * Both are prepared once per connection and planned by key (sql-prepared.ts). Planned at every
 * call, the finish cost PostgreSQL about 0.6 ms a batch to plan (run-path empty, pg_stat_statements:
 * 262 ms planning beside 2,012 running 419 finishes of about 48 runs); a generic plan cached while
 * cw_run_attempts was small would scan it whole as it grows, which planning by key rules out.
 */
const statements = perSchema((t) => ({
  /** Complete the runs $1 (tokens $2, attempts $3); a cast error naming REFUSED_COMPLETION unless all were accepted. */
  completeGroup: sqlPrepared(
    'complete_group',
    ['bigint[]', 'bigint[]', 'int[]'],
    `${finishCtes(
      t,
      '$1',
      '$2',
      "array_fill('completed'::text, ARRAY[cardinality($1)])",
      '$3',
      'array_fill(NULL::text, ARRAY[cardinality($1)])',
      'array_fill(NULL::text, ARRAY[cardinality($1)])',
      'array_fill(NULL::bigint, ARRAY[cardinality($1)])',
      'array_fill(false, ARRAY[cardinality($1)])',
    )}
    SELECT CASE WHEN (SELECT count(*) FROM run) = cardinality($1) THEN true
      ELSE ('${REFUSED_COMPLETION}' || (SELECT count(*) FROM run))::int > 0 END AS accepted`,
    KEEPS_OPEN_RUNS,
  ),
  /** Record outcomes: arrays of run ids, tokens, outcomes, attempts, messages, stacks, retry delays, failures. */
  finish: sqlPrepared(
    'finish_runs',
    ['bigint[]', 'bigint[]', 'text[]', 'int[]', 'text[]', 'text[]', 'bigint[]', 'bool[]'],
    `${finishCtes(t, '$1', '$2', '$3', '$4', '$5', '$6', '$7', '$8')}
    SELECT id AS run_id FROM run`,
    KEEPS_OPEN_RUNS,
  ),
}));

/** The outcome statements delete their closed runs' cw_open_runs rows themselves (closed, in finishCtes). */
const KEEPS_OPEN_RUNS = { [OPEN_RUNS_KEPT_SETTING]: 'on' };

/** What a refused group completion raises: a cast error naming itself. */
export const REFUSED_COMPLETION = 'cronwarden: completion refused, a newer attempt holds the run ';

/**
 * The CTEs of a finish (input, run, attempt, settled); the caller adds the final SELECT.
 * A refused attempt's row was written by whoever moved the run off its claim; `settled` settles the
 * 'running' row a version before 0020 wrote at its claim. The
 * arguments are SQL array expressions (placeholders or literals), one element per request.
 */
function finishCtes(
  t: Tables,
  runIds: string,
  tokens: string,
  outcomes: string,
  attempts: string,
  messages: string,
  stacks: string,
  retryInMs: string,
  failures: string,
): string {
  return `WITH input AS (
      SELECT * FROM unnest(${runIds}::bigint[], ${tokens}::bigint[], ${outcomes}::text[], ${attempts}::int[],
        ${messages}::text[], ${stacks}::text[], ${retryInMs}::bigint[], ${failures}::bool[])
        AS i(run_id, token, outcome, attempt, message, stack, retry_in_ms, failure)
      ORDER BY run_id),
    run AS (
      UPDATE ${t.runs} r SET state = i.outcome,
        finished_at = CASE WHEN i.outcome = 'retrying' THEN NULL ELSE now() END,
        completed_attempt = CASE WHEN i.outcome = 'completed' THEN i.attempt ELSE r.completed_attempt END,
        error = i.message,
        failures = r.failures + CASE WHEN i.failure THEN 1 ELSE 0 END,
        available_at = CASE WHEN i.retry_in_ms > 0 THEN now() + i.retry_in_ms * interval '1 millisecond' END,
        enqueued_at = CASE WHEN i.outcome = 'retrying' THEN now() ELSE r.enqueued_at END
      FROM input i
      WHERE r.id = i.run_id AND r.claim_token = i.token AND r.state IN ${ACTIVE_SQL}
      RETURNING r.id, r.claimed_by, r.claimed_at, i.attempt, i.token, i.outcome, i.message, i.stack,
        r.finished_at IS NOT NULL AS closed),
    attempt AS (
      ${writeOwnEndedAttempts(
        t,
        `SELECT run.id, run.attempt, run.token, COALESCE(run.claimed_by, '${UNKNOWN_WORKER}'), run.outcome,
           COALESCE(run.claimed_at, now()), run.message, run.stack
         FROM run`,
      )}),
    closed AS (DELETE FROM ${t.openRuns} o USING run WHERE o.run_id = run.id AND run.closed),
    settled AS (${settleOldClaimRows(t, 'input')})`;
}

/**
 * Of each request, whether the finish statement accepted it, in order. The statement returns the
 * accepted runs' ids only: saying of each input run whether it was accepted scanned them all, n × n.
 */
export function acceptedInOrder(requests: readonly FinishRequest[], res: pg.QueryResult): boolean[] {
  const accepted = new Set((res.rows as { run_id: string }[]).map((r) => r.run_id));
  return requests.map((r) => accepted.has(r.runId.toString()));
}
