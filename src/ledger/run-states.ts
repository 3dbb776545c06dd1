/** The states of a run, written out once: the schema, the ledger's SQL and the admin API use these. */
import { runStates, type RunState } from '../db/schema.js';
import type { Tables } from '../db/tables.js';

export { runStates, type RunState };

/** A run someone still has to work on: not yet claimed, running, or waiting for its next attempt. */
export const activeRunStates = ['pending', 'running', 'retrying'] as const satisfies readonly RunState[];
export type ActiveRunState = (typeof activeRunStates)[number];

/** A run that is settled for good; retention may delete it. */
export const finishedRunStates = [
  'completed',
  'failed',
  'skipped',
  'cancelled',
  'superseded',
] as const satisfies readonly RunState[];

/** `('a', 'b')` for an IN clause; the values are the constants above, never user input. */
export function sqlStateList(states: readonly RunState[]): string {
  return `(${states.map((s) => `'${s}'`).join(', ')})`;
}

export const ACTIVE_SQL = sqlStateList(activeRunStates);

/**
 * A transaction that sets this LOCAL to 'on' keeps cw_open_runs itself where it closes runs (the
 * outcome statements delete their runs' rows in a CTE): the row trigger that would delete them one
 * at a time, a PL/pgSQL call a run, stands aside (migration 0024). Every other writer, an older
 * replica's too, leaves it unset and the trigger keeps the table.
 */
export const OPEN_RUNS_KEPT_SETTING = 'cronwarden.open_runs_kept';

/**
 * The unfinished runs, as a FROM item: cw_open_runs `<r>_open` (one narrow row a run while its
 * finished_at is NULL, kept by triggers on cw_runs, migration 0019, and by the outcome statements)
 * joined to its run `<r>`. A query of a job's unfinished runs says `<r>_open.job = …`, so it reads
 * that table's job index. No index of cw_runs names `finished_at` or `state` (every writer of
 * `state` keeps finished_at with it; test/integration/ledger-contract.test.ts checks it): a column
 * an index names, in its key or its predicate, makes every update of it a non-HOT update writing
 * an entry into each of the table's indexes, and a claim changes `state`, a completion both.
 */
export const openRunsOf = (t: Tables, r: string): string =>
  `${t.openRuns} ${r}_open JOIN ${t.runs} ${r} ON ${r}.id = ${r}_open.run_id`;
export const FINISHED_SQL = sqlStateList(finishedRunStates);
