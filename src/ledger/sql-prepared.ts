/**
 * Statements PREPAREd in SQL, once per connection, and sent as EXECUTE with literal arguments in a
 * simple-protocol query, which can carry several statements in one round trip (BEGIN with the
 * group commit's check, its completion with COMMIT, planner settings around any of them). Used
 * by the statements that find runs by key: claims, outcomes, the group commit, the outbox, the active runs
 * of jobs, the orphan scan. Planned at every group, the completion cost PostgreSQL more to plan
 * than to run (run-path write, 20,000 runs: 0.59 ms planning and 0.44 ms running a group of 10).
 *
 * A plan cached while a table was small scans it whole, and keeps doing so as the table grows
 * until an ANALYZE replaces it: a new ledger's first minute, and every benchmark round. So these
 * are planned with sequential scans, hash and merge joins off and the generic plan forced: index
 * lookups, whatever the tables' size (a statement must then start from something it can find by
 * key: ids, a job's open runs, the hand-over rows). The settings are LOCAL to the transaction and
 * reset right after the EXECUTE when more of it follows (the handlers' own statements are planned
 * as usual).
 */
import type pg from 'pg';
import { namedStatement } from './named-statement.js';

export interface SqlPrepared {
  readonly name: string;
  /** The PREPARE statement. */
  readonly definition: string;
  /** Settings LOCAL to the transaction its EXECUTE runs in, set with the planner's (names and values are constants). */
  readonly settings: Readonly<Record<string, string>>;
}

/** SQL for one simple-protocol round trip: its statements, the one whose result is wanted, what it EXECUTEs. */
export interface SentSql {
  readonly sql: string;
  readonly resultAt: number;
  readonly prepared: readonly SqlPrepared[];
}

export function sqlPrepared(
  operation: string,
  parameterTypes: readonly string[],
  text: string,
  settings: Readonly<Record<string, string>> = {},
): SqlPrepared {
  const types = parameterTypes.join(', ');
  const { name } = namedStatement(`sql_${operation}`, `(${types}) ${text}`);
  return { name, definition: `PREPARE ${name} (${types}) AS ${text}`, settings };
}

const KEYED_PLANNING: Readonly<Record<string, string>> = {
  enable_seqscan: 'off',
  enable_hashjoin: 'off',
  enable_mergejoin: 'off',
  plan_cache_mode: 'force_generic_plan',
};

/**
 * EXECUTE `s` with `args` (SQL literals), planned by key. `thenReset`: more of the transaction
 * follows, so the planner settings (and the statement's own) go back to the usual ones after it.
 */
export function executeByKey(s: SqlPrepared, args: readonly string[], o: { thenReset: boolean }): SentSql {
  const { sql, resultsAt, prepared } = executeAllByKey([{ s, args }], o);
  return { sql, resultAt: resultsAt[0]!, prepared };
}

/** A plain statement, nothing prepared. */
export function plainSql(sql: string): SentSql {
  return { sql, resultAt: 0, prepared: [] };
}

/** One prepared statement to EXECUTE, with its arguments as SQL literals. */
export interface KeyedExecute {
  readonly s: SqlPrepared;
  readonly args: readonly string[];
}

/**
 * EXECUTE `s` with `args` (SQL literals), planned by key, alone on a client of `pool`: a simple
 * query of several statements runs in one implicit transaction, so its LOCAL planner settings end
 * with it. The EXECUTE's result.
 */
export async function queryByKey(pool: pg.Pool, s: SqlPrepared, args: readonly string[]): Promise<pg.QueryResult> {
  return (await queryAllByKey(pool, [{ s, args }]))[0]!;
}

/**
 * EXECUTE each of `parts` in turn, planned by key, in one round trip on a client of `pool`: one
 * simple query, so one implicit transaction (all of them commit, or none) and one commit. Each
 * part's own settings apply to it alone. Their results, in order.
 */
export async function queryAllByKey(pool: pg.Pool, parts: readonly KeyedExecute[]): Promise<pg.QueryResult[]> {
  const sent = executeAllByKey(parts, { thenReset: false }); // the implicit transaction ends with it
  const client = await pool.connect();
  // The server going away mid-query is an 'error' event as well as the query's rejection.
  const onError = () => undefined;
  client.on('error', onError);
  try {
    await ensurePrepared(client, sent.prepared);
    const res = (await client.query(sent.sql)) as unknown as pg.QueryResult | pg.QueryResult[];
    client.off('error', onError);
    client.release();
    // node-postgres answers a one-statement query with its result, not an array.
    const all = Array.isArray(res) ? res : [res];
    return sent.resultsAt.map((i) => all[i]!);
  } catch (err) {
    client.off('error', onError);
    client.release(err as Error); // discarded, as pg-pool does after a failed query
    throw err;
  }
}

/**
 * The SQL of EXECUTEs planned by key: the planner's settings once, then each part with its own
 * settings around it; `thenReset`: every setting back to the usual after the last part.
 */
function executeAllByKey(
  parts: readonly KeyedExecute[],
  o: { thenReset: boolean },
): { sql: string; resultsAt: number[]; prepared: SqlPrepared[] } {
  // SET LOCAL, not a SELECT of set_config: a utility statement is not planned (the SELECT cost
  // PostgreSQL about 60 µs a claim or finish, two thirds of it planning).
  const set = ([k, v]: [string, string]) => `SET LOCAL ${k} = '${v}'`;
  const reset = ([k]: [string, string]) => `RESET ${k}`;
  const planning = Object.entries(KEYED_PLANNING);
  const statements = planning.map(set);
  const resultsAt: number[] = [];
  for (const [i, { s, args }] of parts.entries()) {
    const own = Object.entries(s.settings);
    statements.push(...own.map(set));
    resultsAt.push(statements.length);
    statements.push(`EXECUTE ${s.name}(${args.join(', ')})`);
    if (i < parts.length - 1 || o.thenReset) statements.push(...own.map(reset));
  }
  if (o.thenReset) statements.push(...planning.map(reset));
  return { sql: statements.join('; '), resultsAt, prepared: parts.map((p) => p.s) };
}

const preparedOn = new WeakMap<pg.ClientBase, Set<string>>();

/** PREPARE on `client` those of `statements` it has not prepared yet (a round trip each, the first time only). */
export async function ensurePrepared(client: pg.ClientBase, statements: readonly SqlPrepared[]): Promise<void> {
  let done = preparedOn.get(client);
  for (const s of statements) {
    if (done?.has(s.name)) continue;
    try {
      await client.query(s.definition);
    } catch (err) {
      // Already there (its first PREPARE's answer was lost): a name is a hash of its text, so it is this one.
      if ((err as { code?: string }).code !== '42P05') throw err;
    }
    if (!done) preparedOn.set(client, (done = new Set()));
    done.add(s.name);
  }
}
