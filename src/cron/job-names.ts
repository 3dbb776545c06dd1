/**
 * What a job's name says. A job from code is its name (letters, digits and `. _ : -`, never `/`).
 * A runtime schedule is the job "<handler>/<id>": the name says which handler runs it, but the
 * schedule is its id, and its handler may change (an update, or a delete and re-create with another
 * handler) while its slots stay the same. So a slot belongs to the job's slot owner, not its name:
 * the unique key, the last fire a catch-up starts from and the lock order all go by the owner.
 * Runs of the node-cron coordinator ("node-cron:<task>", any task name) are not runtime schedules.
 */

/** Job names from code never contain '/', so a runtime schedule's name cannot meet one. */
export const RUNTIME_SEPARATOR = '/';

/** The prefix of the node-cron coordinator's runs (src/jobs/node-cron-coordinator.ts). */
export const NODE_CRON_PREFIX = 'node-cron:';

export function runtimeJobName(handler: string, id: string): string {
  return `${handler}${RUNTIME_SEPARATOR}${id}`;
}

/** The handler (job from code) that runs `job`: itself, or a runtime schedule's handler. */
export function handlerOf(job: string): string {
  const i = job.indexOf(RUNTIME_SEPARATOR);
  return i < 0 ? job : job.slice(0, i);
}

/**
 * The runtime schedule `job` is a run of, or undefined for a job from code. The ledger derives the
 * same from each run's job name (SCHEDULE_ID_SQL), for its unique key.
 */
export function scheduleIdOf(job: string): string | undefined {
  const i = job.indexOf(RUNTIME_SEPARATOR);
  return i < 0 || job.startsWith(NODE_CRON_PREFIX) ? undefined : job.slice(i + 1);
}

/**
 * Whose slots `job` fires: a job from code's own name, a runtime schedule's "/<id>" whatever its
 * handler. Two fires of one owner at one instant are the same slot. ("/<id>" cannot be a job
 * from code, whose names have no '/'.)
 */
export function slotOwner(job: string): string {
  const id = scheduleIdOf(job);
  return id === undefined ? job : `${RUNTIME_SEPARATOR}${id}`;
}

/** scheduleIdOf in SQL, over the text column `column`: the ledger's generated `schedule_id`. */
export function scheduleIdSql(column: string): string {
  const sep = `strpos(${column}, '${RUNTIME_SEPARATOR}')`;
  return `CASE WHEN ${sep} > 0 AND ${column} NOT LIKE '${NODE_CRON_PREFIX}%' THEN substr(${column}, ${sep} + 1) END`;
}
