/**
 * The ledger: the single source of truth for what fired, who ran it, and which tokens were seen.
 * drizzle-kit generates migrations/ from this file; never edit a migration that has landed.
 * The tables are declared without a schema: src/db/migrate.ts applies the generated SQL inside
 * the deployment's own schema (src/db/tables.ts), rebasing the "public" drizzle-kit writes.
 */
import { sql } from 'drizzle-orm';
import { scheduleIdSql } from '../cron/job-names.js';
import {
  bigint,
  bigserial,
  boolean,
  index,
  integer,
  jsonb,
  pgSequence,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';

const tstz = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });
const token = (name: string) => bigint(name, { mode: 'bigint' });

/** PostgreSQL lease backend: one row per lease name; `token` only grows, on every change of holder. */
export const leases = pgTable('cw_leases', {
  name: text('name').primaryKey(),
  holder: text('holder'),
  token: token('token')
    .notNull()
    .default(sql`0`),
  expiresAt: tstz('expires_at'),
  acquiredAt: tstz('acquired_at'),
  renewedAt: tstz('renewed_at'),
});

/** Highest token accepted per resource. A write with a lower token is refused (fencing). */
export const fences = pgTable('cw_fences', {
  resource: text('resource').primaryKey(),
  token: token('token').notNull(),
  updatedAt: tstz('updated_at').notNull().defaultNow(),
});

/** Execution tokens for run claims: each claim of any run gets a value above every earlier one. */
export const executionTokenSeq = pgSequence('cw_execution_token_seq', { startWith: 1, increment: 1 });

/**
 * 'superseded': the run's fenced write was refused because a later slot of the same resource had
 * already written (a catch-up run that lost the race); settled, without its effect, not failed.
 */
export const runStates = [
  'pending',
  'running',
  'retrying',
  'completed',
  'failed',
  'skipped',
  'cancelled',
  'superseded',
] as const;
export type RunState = (typeof runStates)[number];

/** What a cw_runs row is: a job's run, a workflow's run, or one step (item) of a workflow run. */
export type RunKind = 'job' | 'workflow' | 'step';

/**
 * Runs outside the unique (job, scheduled_at) key: a manual trigger and a one-off run are extra
 * runs (a one-off has its own key, (job, once_key)); a workflow step run belongs to its workflow
 * run's slot (its key is (workflow_run_id, step, item)). The predicate of the key's index, which
 * every ON CONFLICT on it repeats.
 */
export const SLOT_KEY_PREDICATE = `"trigger" NOT IN ('manual', 'once', 'step')`;

/** One row per fire. The unique (job, scheduled_at) key is invariant I1. */
export const runs = pgTable(
  'cw_runs',
  {
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    job: text('job').notNull(),
    scheduledAt: tstz('scheduled_at').notNull(),
    /** schedule | catchup | manual */
    trigger: text('trigger').notNull().default('schedule'),
    leaderToken: token('leader_token').notNull(),
    leaderId: text('leader_id').notNull(),
    state: text('state').$type<RunState>().notNull().default('pending'),
    /**
     * Set once the run is handed to BullMQ; NULL rows are the outbox (with cw_hand_overs). A run
     * handed over straight from its commit (a fire, a step run) gets it at the commit, with a
     * cw_hand_overs row until the queue took it.
     */
    enqueuedAt: tstz('enqueued_at'),
    /** Execution token of the newest claim; older attempts are stale. */
    claimToken: token('claim_token'),
    attempts: integer('attempts').notNull().default(0),
    completedAttempt: integer('completed_attempt'),
    skippedAttempts: integer('skipped_attempts').notNull().default(0),
    startedAt: tstz('started_at'),
    finishedAt: tstz('finished_at'),
    error: text('error'),
    createdAt: tstz('created_at').notNull().defaultNow(),
    /** When the leader last checked that the queue still holds this handed-over run (re-delivery sweep). */
    deliveryCheckedAt: tstz('delivery_checked_at'),
    /** The runtime schedule version that fired this run (cw_schedule_versions); NULL for jobs from code. */
    scheduleVersion: integer('schedule_version'),
    /** The JSON the handler sees as ctx.payload (runtime schedule, one-off or manual run); NULL for none. */
    payload: jsonb('payload'),
    /** A one-off run's caller-supplied key: one run per (job, once_key), the second request gets the first. */
    onceKey: text('once_key'),
    /**
     * The replica whose worker holds the newest claim. Its member row (cw_members.last_seen) says
     * whether it is still alive: a running run whose claimer stopped beating is handed out again.
     */
    claimedBy: text('claimed_by'),
    /**
     * When the newest claim was made: the start of the running attempt, whose cw_run_attempts row
     * is written once it ends (NULL: claimed by a version before 0020, which wrote the row at once).
     */
    claimedAt: tstz('claimed_at'),
    /** Attempts the handler failed (thrown, timed out): the job's retries count these, not hand-backs. */
    failures: integer('failures').notNull().default(0),
    /** A run is not claimed before this instant (a retry's backoff, a step's delay); NULL: now. */
    availableAt: tstz('available_at'),
    /** 'job'; 'workflow' for a workflow run (its steps do the work); 'step' for a step run of one. */
    kind: text('kind').$type<RunKind>().notNull().default('job'),
    /** A step run's workflow run (cw_runs.id). */
    workflowRunId: bigint('workflow_run_id', { mode: 'bigint' }),
    /** A step run's step name. */
    step: text('step'),
    /** A mapped step run's item index (0-based); NULL for a step that is not mapped. */
    item: integer('item'),
    /** A completed step run's result (JSON); a workflow run's: its definition's fingerprint, once started. */
    result: jsonb('result'),
    /** The concurrency key the run holds a slot of while it runs, set at its first claim (run-limits.ts). */
    limitKey: text('limit_key'),
    /** Its job's priority: among the runs waiting for a slot of a key, higher ones go first. */
    priority: integer('priority').notNull().default(0),
    /** Overlap 'coalesce': how many later slots this waiting run stands for, and the newest of them. */
    coalesced: integer('coalesced').notNull().default(0),
    coalescedUntil: tstz('coalesced_until'),
    /**
     * The runtime schedule this is a run of (the id in "<handler>/<id>"), NULL for jobs from code:
     * derived from the job name by the database (src/cron/job-names.ts), so every writer, an older
     * replica's too, gets it.
     */
    scheduleId: text('schedule_id').generatedAlwaysAs(sql.raw(scheduleIdSql('job'))),
    /**
     * Set by migration 0012 only: this run repeated the slot of run `duplicate_of` under another
     * handler's name (issue 25, before a runtime schedule's slots were keyed by its id). Kept as it
     * was, outside the schedule's key, so that key could be built over the older ledger.
     */
    duplicateOf: bigint('duplicate_of', { mode: 'bigint' }),
    /**
     * The concurrency key while the run is unfinished, NULL once it finished (or for a run of no
     * key): derived by the database, so the index of a key's waiting runs need not name
     * `finished_at`, and a completion of a run of no key changes no indexed value (a HOT update).
     */
    openLimitKey: text('open_limit_key').generatedAlwaysAs(
      sql.raw(`CASE WHEN "finished_at" IS NULL THEN "limit_key" END`),
    ),
    /** A workflow run's end, NULL for any other run: the metrics' index, which must not name `finished_at` either. */
    workflowFinishedAt: tstz('workflow_finished_at').generatedAlwaysAs(
      sql.raw(`CASE WHEN "kind" = 'workflow' THEN "finished_at" END`),
    ),
  },
  (t) => [
    // Manual triggers and one-off runs are outside the key: a trigger that lands on a scheduled
    // instant must neither swallow that fire nor be refused as its duplicate. One-off runs have
    // their own key, (job, once_key).
    uniqueIndex('cw_runs_job_scheduled_at').on(t.job, t.scheduledAt).where(sql.raw(SLOT_KEY_PREDICATE)),
    // The unfinished runs of a concurrency key, the waiting ones by priority, then oldest first.
    index('cw_runs_open_limit_key')
      .on(t.openLimitKey, t.priority.desc(), t.scheduledAt, t.id)
      .where(sql`${t.openLimitKey} IS NOT NULL`),
    // The metrics' workflow runs that ended since the last scrape.
    index('cw_runs_workflow_finished_at')
      .on(t.workflowFinishedAt)
      .where(sql`${t.workflowFinishedAt} IS NOT NULL`),
    // One run per step (per item of a mapped step) of a workflow run: a step is created once.
    uniqueIndex('cw_runs_workflow_step_item')
      .on(t.workflowRunId, t.step, sql`COALESCE(${t.item}, -1)`)
      .where(sql`${t.workflowRunId} IS NOT NULL`),
    // A runtime schedule's slot once, whichever handler's name it fired under: its identity is
    // its id, not its handler.
    uniqueIndex('cw_runs_schedule_slot')
      .on(t.scheduleId, t.scheduledAt)
      .where(sql`${t.scheduleId} IS NOT NULL AND ${t.trigger} NOT IN ('manual', 'once') AND ${t.duplicateOf} IS NULL`),
    uniqueIndex('cw_runs_job_once_key')
      .on(t.job, t.onceKey)
      .where(sql`${t.onceKey} IS NOT NULL`),
    index('cw_runs_outbox')
      .on(t.createdAt)
      .where(sql`${t.enqueuedAt} IS NULL`),
    // No index names `finished_at` or `state`, so a claim and a completion are HOT updates (the
    // unfinished runs are cw_open_runs; ledger/run-states.ts).
    // Retention deletes the oldest finished runs.
    index('cw_runs_created').on(t.createdAt),
    // The failover history's "last fire of the previous tenure".
    index('cw_runs_leader_created').on(t.leaderToken, t.leaderId, t.createdAt),
    // The console's keyset paging, newest first: the whole ledger, and one job's runs.
    index('cw_runs_scheduled_id').on(t.scheduledAt, t.id),
    index('cw_runs_job_scheduled_id').on(t.job, t.scheduledAt, t.id),
  ],
);

/**
 * Every ended attempt of every run, for the admin view and the drill checker, written once when the
 * attempt ends (its outcome, a takeover, a cancellation, a hand-back). The running attempt is the
 * run's own row (state 'running': attempts, claim_token, claimed_by, claimed_at), so a run's claim
 * and completion add one row here, not a row and its second version. Versions before 0020 wrote a
 * 'running' row at the claim; whoever ends that attempt settles the row instead.
 */
export const runAttempts = pgTable(
  'cw_run_attempts',
  {
    /**
     * Its run (cw_runs.id). No foreign key: its check locked the run's row again at each attempt
     * row's insert (a second WAL record a run); a run's attempts go with it by a trigger on cw_runs
     * (migration 0022), as the key's cascade did.
     */
    runId: bigint('run_id', { mode: 'bigint' }).notNull(),
    attempt: integer('attempt').notNull(),
    token: token('token').notNull(),
    worker: text('worker').notNull(),
    /** running | completed | failed | retrying | cancelled | superseded | skipped | stale */
    state: text('state').notNull(),
    startedAt: tstz('started_at').notNull().defaultNow(),
    finishedAt: tstz('finished_at'),
    /** The error's message, bounded and sanitised (see src/ledger/stored-text.ts). */
    error: text('error'),
    /** The error's stack, bounded and sanitised. */
    errorStack: text('error_stack'),
  },
  // Only the primary key: each index entry is WAL every attempt writes (migration 0025).
  (t) => [primaryKey({ columns: [t.runId, t.attempt] })],
);

/**
 * Per-job state the leader needs across elections: paused flag, last committed fire. A runtime
 * schedule's last fire is the newest of its rows under any handler's name (schedule_id).
 */
export const jobState = pgTable(
  'cw_job_state',
  {
    job: text('job').primaryKey(),
    paused: boolean('paused').notNull().default(false),
    /** Why, by whom, since and until when the job is paused (null until: until resumed). */
    pausedReason: text('paused_reason'),
    pausedBy: text('paused_by'),
    pausedAt: tstz('paused_at'),
    /** Slots scheduled at or after this instant fire again; the leader clears the pause under its fence. */
    pausedUntil: tstz('paused_until'),
    lastScheduledAt: tstz('last_scheduled_at'),
    updatedAt: tstz('updated_at').notNull().defaultNow(),
    /** As cw_runs.schedule_id: the runtime schedule of the job, NULL for jobs from code. */
    scheduleId: text('schedule_id').generatedAlwaysAs(sql.raw(scheduleIdSql('job'))),
  },
  (t) => [index('cw_job_state_schedule_id').on(t.scheduleId)],
);

/** Replicas that are alive (heartbeat), for the admin members view. */
export const members = pgTable('cw_members', {
  replicaId: text('replica_id').primaryKey(),
  host: text('host').notNull(),
  pid: integer('pid').notNull(),
  version: text('version').notNull(),
  role: text('role').notNull(),
  /** Where this replica's admin HTTP listens, so any replica can point a client at the leader. */
  adminUrl: text('admin_url'),
  /** The jobs this replica defines, sorted: during a rolling deploy the members view shows who differs. */
  jobs: text('jobs').array(),
  startedAt: tstz('started_at').notNull().defaultNow(),
  lastSeen: tstz('last_seen').notNull().defaultNow(),
  /**
   * Claims this replica saw commit that the ledger no longer has (a failover to a standby that had
   * not received them): counted by its heartbeat (ledger/commit-witness.ts), read by the ledger check.
   */
  lostWrites: integer('lost_writes').notNull().default(0),
  /** When its heartbeat last found one (database clock). */
  lostWritesAt: tstz('lost_writes_at'),
  /** The first it found, in words. */
  lostWriteExample: text('lost_write_example'),
});

/**
 * The live ledger check's reports (scheduler/chores/ledger-check.ts), newest last: the leader
 * writes one per round and keeps the last few, so every replica's admin API and metrics serve the
 * same last report, whoever leads now.
 */
export const ledgerChecks = pgTable('cw_ledger_checks', {
  id: bigserial('id', { mode: 'bigint' }).primaryKey(),
  checkedAt: tstz('checked_at').notNull().defaultNow(),
  /** The report: window, counts per check, examples (LedgerCheckReport). */
  report: jsonb('report').notNull(),
});

/**
 * One row per step of a workflow run (its gate): how many of its needs have yet to complete, how
 * many of its items (1 when not mapped) have yet to complete, and its state. Every change of a
 * workflow run's progress locks the workflow run's row first, then the gates in step-name order.
 */
export const workflowSteps = pgTable(
  'cw_workflow_steps',
  {
    workflowRunId: bigint('workflow_run_id', { mode: 'bigint' })
      .notNull()
      .references(() => runs.id, { onDelete: 'cascade' }),
    step: text('step').notNull(),
    /** waiting (for needs, a signal or a delay) | ready (its runs exist) | completed | failed | cancelled */
    state: text('state').notNull(),
    /** Needs not completed yet, plus one while a signal it waits for has not come. */
    needsLeft: integer('needs_left').notNull(),
    /** Its runs: 1 when not mapped, the fan-out width when mapped; NULL until it is ready. */
    itemsTotal: integer('items_total'),
    itemsLeft: integer('items_left'),
    /** A step waiting for this signal, and until when (then its onTimeout applies). */
    waitsFor: text('waits_for'),
    timeoutAt: tstz('timeout_at'),
    /** Why it failed or was cancelled. */
    reason: text('reason'),
    readyAt: tstz('ready_at'),
    completedAt: tstz('completed_at'),
  },
  (t) => [
    primaryKey({ columns: [t.workflowRunId, t.step] }),
    index('cw_workflow_steps_timeout')
      .on(t.timeoutAt)
      .where(sql`${t.state} = 'waiting' AND ${t.timeoutAt} IS NOT NULL`),
  ],
);

/**
 * Concurrency limits across replicas and jobs: `limit` slot rows per key, each held by one run
 * (its claim token, its worker) from before its handler starts until the handler returned. See
 * ledger/run-limits.ts for when a slot is free.
 */
export const limitSlots = pgTable(
  'cw_limit_slots',
  {
    key: text('key').notNull(),
    slot: integer('slot').notNull(),
    runId: bigint('run_id', { mode: 'bigint' }),
    token: token('token'),
    /** The worker the handler runs on (cw_workers): its slots are free once it stops beating. */
    worker: text('worker'),
    takenAt: tstz('taken_at'),
  },
  (t) => [primaryKey({ columns: [t.key, t.slot] })],
);

/**
 * Rate limits across replicas and jobs: the recent starts of each key, and the reserved start
 * instants of the runs waiting their turn (used = false until the run starts on it). See
 * ledger/run-rate-limits.ts.
 */
export const rateStarts = pgTable(
  'cw_rate_starts',
  {
    key: text('key').notNull(),
    at: tstz('at').notNull(),
    runId: bigint('run_id', { mode: 'bigint' }).notNull(),
    used: boolean('used').notNull(),
  },
  (t) => [primaryKey({ columns: [t.key, t.at, t.runId] })],
);

/** Signals sent to workflow runs (an approval): the first of a name wins, later ones change nothing. */
export const signals = pgTable(
  'cw_signals',
  {
    workflowRunId: bigint('workflow_run_id', { mode: 'bigint' })
      .notNull()
      .references(() => runs.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    payload: jsonb('payload'),
    /** Who sent it; 'timeout' for the marker a timed-out wait with onTimeout 'continue' leaves. */
    sentBy: text('sent_by').notNull(),
    sentAt: tstz('sent_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.workflowRunId, t.name] })],
);

/**
 * Workers that are alive: each beats its row a few times per liveness window. A running run whose
 * claimer (cw_runs.claimed_by) has no row that beat within the window is handed out again.
 */
export const workers = pgTable('cw_workers', {
  worker: text('worker').primaryKey(),
  beatAt: tstz('beat_at').notNull().defaultNow(),
  startedAt: tstz('started_at').notNull().defaultNow(),
});

/**
 * Runs a fire commit or a step completion released to the queue whose hand-over is not yet
 * confirmed: inserted with the run, deleted once BullMQ took it. What the leader's outbox sweep
 * hands over again after a crash or a queue outage. A narrow row of its own, so the confirmation is
 * the delete of one small row, not a second version of the run's wide row and of each of its indexes.
 */
export const handOvers = pgTable('cw_hand_overs', {
  runId: bigint('run_id', { mode: 'bigint' }).primaryKey(),
});

/**
 * The unfinished runs (finished_at NULL), by job: what the overlap policies, the sweeps and the
 * ledger check scan instead of the whole ledger. Kept by triggers on cw_runs (migration 0019), so
 * every writer, an older replica's too, keeps it true in its own transaction. A table of its own,
 * so no index of cw_runs names `finished_at`: a completion is then a HOT update of the run's row
 * plus the delete of this narrow one, not a new version of the run's row and each of its indexes.
 */
export const openRuns = pgTable(
  'cw_open_runs',
  {
    runId: bigint('run_id', { mode: 'bigint' }).primaryKey(),
    job: text('job').notNull(),
  },
  (t) => [index('cw_open_runs_job').on(t.job)],
);

/** One row per won election (a tenure): the failover history, with its last renew and its release. */
export const elections = pgTable(
  'cw_elections',
  {
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    leaseName: text('lease_name').notNull(),
    leader: text('leader').notNull(),
    token: token('token').notNull(),
    backend: text('backend').notNull(),
    electedAt: tstz('elected_at').notNull().defaultNow(),
    /** The tenure's last successful renew (database clock): a crashed leader's handover starts here. */
    renewedAt: tstz('renewed_at'),
    /** When the tenure released its lease (resign, stop): a graceful handover starts here. */
    releasedAt: tstz('released_at'),
  },
  (t) => [index('cw_elections_lease_elected').on(t.leaseName, t.electedAt)],
);

/**
 * One row: this ledger's identity, a random id made when the ledger was created. Queue job ids
 * include it, so runs of a new ledger (same Redis, reset database) are never mistaken for the old
 * ledger's finished jobs that BullMQ still retains.
 */
export const ledgerMeta = pgTable('cw_ledger', {
  id: uuid('id').primaryKey().defaultRandom(),
  createdAt: tstz('created_at').notNull().defaultNow(),
  /** The namespace whose ledger this schema holds; set by its first replica, checked by every later one. */
  namespace: text('namespace'),
});

/**
 * Schedules created at runtime (API, CLI) for a handler defined in code. Their runs are fired under
 * the job name "<handler>/<id>" and keyed by (schedule_id, scheduled_at), whatever the handler.
 * `version` is the current one; a deleted schedule keeps its row (deleted_at) so its history stays.
 */
export const schedules = pgTable('cw_schedules', {
  id: text('id').primaryKey(),
  handler: text('handler').notNull(),
  cron: text('cron').notNull(),
  timezone: text('timezone').notNull().default('UTC'),
  misfire: text('misfire').notNull(),
  overlap: text('overlap').notNull(),
  catchUpWindowMs: integer('catch_up_window_ms').notNull(),
  misfireGraceMs: integer('misfire_grace_ms').notNull(),
  payload: jsonb('payload'),
  paused: boolean('paused').notNull().default(false),
  version: integer('version').notNull(),
  deletedAt: tstz('deleted_at'),
  createdAt: tstz('created_at').notNull().defaultNow(),
  updatedAt: tstz('updated_at').notNull().defaultNow(),
});

/**
 * Every change of a runtime schedule, kept: who, when, before and after. `effective_at` is the
 * change's instant on the ledger's clock: slots before it belong to the previous version, slots at
 * or after it to this one (the boundary rule; see src/ledger/schedule-ledger.ts).
 */
export const scheduleVersions = pgTable(
  'cw_schedule_versions',
  {
    scheduleId: text('schedule_id').notNull(),
    version: integer('version').notNull(),
    /** create | update | pause | resume | delete */
    action: text('action').notNull(),
    actor: text('actor').notNull(),
    effectiveAt: tstz('effective_at').notNull(),
    before: jsonb('before'),
    after: jsonb('after'),
  },
  (t) => [primaryKey({ columns: [t.scheduleId, t.version] })],
);

/**
 * Due instants no run answers, stored as ranges: a leader that came back after an outage (or fired
 * late) and did not fire them, under the job's misfire policy, catch-up window, maxCatchUp or its
 * bound on fires per catch-up. One row per range and reason (a day of a per-second job is one row),
 * written in the transaction that commits the catch-up's fires (fire-commit.ts), keyed so that a
 * retried commit extends a range instead of doubling it. See docs/concepts/occurrences.md.
 */
export const missedRanges = pgTable(
  'cw_missed_ranges',
  {
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    job: text('job').notNull(),
    /** The first and last missed instant of the range, and how many there are. */
    firstAt: tstz('first_at').notNull(),
    lastAt: tstz('last_at').notNull(),
    count: bigint('count', { mode: 'number' }).notNull(),
    /** False when counting stopped at its budget: `count` is then a lower bound. */
    countExact: boolean('count_exact').notNull(),
    /** catch-up-window | misfire-policy | max-catch-up | max-fires (src/cron/occurrence-reasons.ts) */
    reason: text('reason').notNull(),
    /** The outage: the last instant handled before it (null: none), and when the deciding leader planned. */
    outageStart: tstz('outage_start'),
    outageEnd: tstz('outage_end').notNull(),
    /** The tenure that decided: its leader token and replica. */
    leaderToken: token('leader_token').notNull(),
    leaderId: text('leader_id').notNull(),
    recordedAt: tstz('recorded_at').notNull().defaultNow(),
    /** As cw_runs.schedule_id: a runtime schedule's ranges under any handler's name. */
    scheduleId: text('schedule_id').generatedAlwaysAs(sql.raw(scheduleIdSql('job'))),
  },
  (t) => [
    uniqueIndex('cw_missed_ranges_job_reason_first').on(t.job, t.reason, t.firstAt),
    index('cw_missed_ranges_job_last').on(t.job, t.lastAt),
    index('cw_missed_ranges_schedule_id').on(t.scheduleId),
  ],
);

/**
 * The schedule each job's due instants are accounted under, from the instant it took effect (the
 * first instant it accounts is after `from_at`) until the next era (`to_at`, null while current).
 * Written only when a leader starts leading a job whose schedule differs from its open era's (or
 * that has none): no write per fire.
 */
export const scheduleEras = pgTable(
  'cw_schedule_eras',
  {
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    /** The job's slot owner: its name, or "/<id>" for a runtime schedule. */
    job: text('job').notNull(),
    expression: text('expression').notNull(),
    timezone: text('timezone').notNull(),
    /** The DST policy, "<repeat>/<gap>" (src/cron/cron-schedule.ts). */
    dst: text('dst').notNull(),
    fromAt: tstz('from_at').notNull(),
    toAt: tstz('to_at'),
    leaderToken: token('leader_token').notNull(),
    leaderId: text('leader_id').notNull(),
    recordedAt: tstz('recorded_at').notNull().defaultNow(),
  },
  (t) => [
    // By slot owner (src/cron/job-names.ts): a runtime schedule's era is its id's, whatever its handler.
    uniqueIndex('cw_schedule_eras_open')
      .on(t.job)
      .where(sql`${t.toAt} IS NULL`),
    index('cw_schedule_eras_job_from').on(t.job, t.fromAt),
  ],
);
