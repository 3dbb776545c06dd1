/**
 * The admin thread's first module: it lowers the thread's CPU priority before the server's modules
 * load. Loading them (fastify, the routes, the console) costs the thread about 0.6 s of CPU as a
 * replica starts, and at the process's priority that competed with the scheduler's thread and with
 * the host's other replicas: a replica started again after a crash slowed the live ones' stand-in
 * fires (docs/benchmarks.md, "A twenty-sixth day").
 */
import { workerData } from 'node:worker_threads';
import type { AdminThreadInit } from './admin-thread.js';
import { lowerThreadPriority } from './thread-priority.js';

const { niceness } = workerData as Pick<AdminThreadInit, 'niceness'>;
const priority = niceness > 0 ? lowerThreadPriority(niceness) : undefined;
const { runAdminThread } = await import('./admin-worker.js');
await runAdminThread(priority);
