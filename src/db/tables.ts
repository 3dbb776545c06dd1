/**
 * Where cronwarden's tables live: one PostgreSQL schema per deployment (namespace), default
 * `cronwarden`, its migration journal included. Nothing goes into `public` or `drizzle`, so the
 * application's own tables and drizzle journal on the same database are never touched.
 *
 * Why a schema per namespace rather than a namespace column in every key: isolation is then a
 * property of the name every statement carries, not of a WHERE clause each of ~60 statements
 * must remember (a missed one would leak runs, fences or pause flags between deployments); each
 * deployment migrates on its own (two deployments on different cronwarden versions do not share
 * one journal), and retention, run ids, execution tokens and the ledger identity stay separate.
 * The schema records its namespace (cw_ledger.namespace), so two namespaces that were pointed at
 * one schema are refused instead of mixed.
 *
 * Every statement names its tables through `Tables` (schema-qualified, quoted) instead of relying
 * on search_path: `ctx.transaction` hands the user's handler a client of cronwarden's pool, whose
 * unqualified names must resolve exactly as they would without cronwarden, and a handler that
 * changes search_path must not redirect the run's completion.
 */
import { createHash } from 'node:crypto';
import { InvalidConfigError } from '../errors.js';

export const DEFAULT_SCHEMA = 'cronwarden';
export const DEFAULT_NAMESPACE = 'default';

/** Lower-case SQL identifiers only, so the name means the same quoted or not (psql, pg_dump). */
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;
const RESERVED = new Set(['public', 'drizzle', 'information_schema']);

/** A schema name we may create and own; refuses `public`, `drizzle`, system schemas and odd names. */
export function validateSchemaName(name: string, setting = 'schema'): string {
  if (!SCHEMA_NAME.test(name)) {
    throw new InvalidConfigError(
      setting,
      `"${name}" is not a schema name we accept: lower-case letters, digits and _, starting with a letter or _, at most 63`,
    );
  }
  if (RESERVED.has(name) || name.startsWith('pg_'))
    throw new InvalidConfigError(
      setting,
      `"${name}" is not cronwarden's to own; choose a schema of its own such as "cronwarden"`,
    );
  return name;
}

/**
 * The default schema of a namespace: `cronwarden` for the default namespace, else
 * `cronwarden_<namespace>` (lower-cased, other characters as _; a long one shortened with a hash).
 * Two namespaces that map to one schema ("A-b", "a_b") meet the namespace check in cw_ledger.
 */
export function schemaForNamespace(namespace: string): string {
  if (namespace === DEFAULT_NAMESPACE) return DEFAULT_SCHEMA;
  const name = `${DEFAULT_SCHEMA}_${namespace.toLowerCase().replace(/[^a-z0-9_]/g, '_')}`;
  if (name.length <= 63) return name;
  const hash = createHash('sha256').update(namespace).digest('hex').slice(0, 8);
  return `${name.slice(0, 54)}_${hash}`;
}

/** The schema a deployment uses: the one given, else its namespace's default; validated. */
export function resolveSchema(o: { schema?: string; namespace?: string }): string {
  return validateSchemaName(o.schema ?? schemaForNamespace(o.namespace ?? DEFAULT_NAMESPACE));
}

/** cronwarden's tables and sequence in one schema, each name quoted and schema-qualified. */
export interface Tables {
  readonly schema: string;
  readonly leases: string;
  readonly fences: string;
  readonly runs: string;
  readonly runAttempts: string;
  readonly jobState: string;
  readonly members: string;
  readonly workers: string;
  /** Runs released to the queue at their commit, until the queue took them (the outbox's other half). */
  readonly handOvers: string;
  /** The unfinished runs by job, kept by triggers on cw_runs. */
  readonly openRuns: string;
  readonly workflowSteps: string;
  readonly limitSlots: string;
  readonly rateStarts: string;
  readonly signals: string;
  readonly elections: string;
  readonly ledger: string;
  readonly schedules: string;
  readonly scheduleVersions: string;
  /** The live ledger check's reports. */
  readonly ledgerChecks: string;
  readonly missedRanges: string;
  readonly scheduleEras: string;
  /** NOTIFY channel of this schema's runtime schedule changes (a string for pg_notify / LISTEN). */
  readonly scheduleChannel: string;
  /** As a regclass literal for nextval(): `'"schema"."cw_execution_token_seq"'`. */
  readonly executionTokenSeq: string;
  /** The migration journal, in drizzle's format. */
  readonly journal: string;
}

/** Unqualified names of the tables (0.1.0 kept them in public); sequences owned by them move with them. */
export const TABLE_NAMES = [
  'cw_leases',
  'cw_fences',
  'cw_runs',
  'cw_run_attempts',
  'cw_job_state',
  'cw_members',
  'cw_elections',
  'cw_ledger',
] as const;
export const EXECUTION_TOKEN_SEQ = 'cw_execution_token_seq';
export const JOURNAL_TABLE = '__drizzle_migrations';

export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

const cache = new Map<string, Tables>();

export function tablesIn(schema: string = DEFAULT_SCHEMA): Tables {
  let t = cache.get(schema);
  if (!t) {
    const s = quoteIdent(validateSchemaName(schema));
    const q = (name: string) => `${s}.${quoteIdent(name)}`;
    t = {
      schema,
      leases: q('cw_leases'),
      fences: q('cw_fences'),
      runs: q('cw_runs'),
      runAttempts: q('cw_run_attempts'),
      jobState: q('cw_job_state'),
      members: q('cw_members'),
      workers: q('cw_workers'),
      handOvers: q('cw_hand_overs'),
      openRuns: q('cw_open_runs'),
      workflowSteps: q('cw_workflow_steps'),
      limitSlots: q('cw_limit_slots'),
      rateStarts: q('cw_rate_starts'),
      signals: q('cw_signals'),
      elections: q('cw_elections'),
      ledger: q('cw_ledger'),
      schedules: q('cw_schedules'),
      scheduleVersions: q('cw_schedule_versions'),
      ledgerChecks: q('cw_ledger_checks'),
      missedRanges: q('cw_missed_ranges'),
      scheduleEras: q('cw_schedule_eras'),
      scheduleChannel: `cronwarden_schedules_${schema}`.slice(0, 63),
      executionTokenSeq: `'${q(EXECUTION_TOKEN_SEQ)}'`,
      journal: q(JOURNAL_TABLE),
    };
    cache.set(schema, t);
  }
  return t;
}
