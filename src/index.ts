/** cronwarden's public API. */
export {
  defineJob,
  type JobOptions,
  type JobDefinition,
  type MisfirePolicy,
  type OverlapPolicy,
} from './jobs/define-job.js';
export type { JobContext, JobHandler, TransactionClient, TransactionOptions } from './jobs/job-context.js';
export {
  defineWorkflow,
  isWorkflow,
  MAX_FAN_OUT,
  MAX_STEPS,
  WorkflowDefinition,
  type ReceivedSignal,
  type StepContext,
  type StepInput,
  type StepOptions,
  type WorkflowOptions,
} from './jobs/define-workflow.js';
export { JobRegistry, UnknownJobError } from './jobs/job-registry.js';
export { NodeCronCoordinator } from './jobs/node-cron-coordinator.js';
export { Replica, type ReplicaOptions, type ReplicaAdminOptions, type ReplicaEvents } from './replica/replica.js';
export { CronSchedule } from './cron/cron-schedule.js';
export { createLeaseBackend, type BackendConfig } from './locks/create-backend.js';
export { MemoryLeaseBackend, MemoryLeaseStore } from './locks/memory.js';
export { withLock, type LockContext, type WithLockOptions } from './locks/with-lock.js';
export type { Lease, LeaseBackend, LeaseRecord, LeaseRequest } from './locks/lease.js';
export { migrateDatabase } from './db/migrate.js';
export { checkHistory, readHistory } from './drill/checker.js';
export { systemClock, type Clock } from './clock.js';
export * from './errors.js';
