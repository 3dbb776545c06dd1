/**
 * Lowers the CPU priority of the calling thread alone. On Linux every thread has its own nice
 * value: /proc/thread-self links to "<pid>/task/<tid>", and setpriority(PRIO_PROCESS, tid) renices
 * just that thread. The admin thread calls it so that under a flood the scheduler's thread (fires,
 * lease renewals) wins the cores. Raising one's own nice value needs no privilege.
 */
import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';

export type ThreadPriority =
  /** The thread's OS id and the nice value it now runs at. */
  | { tid: number; nice: number }
  /** Why it was left at the process's priority. */
  | { unavailable: string };

/** Nice values run from -20 (first) to 19 (last). */
const LOWEST = 19;

/** Adds `by` to this thread's nice value (at most to 19). */
export function lowerThreadPriority(by: number): ThreadPriority {
  let tid: number;
  try {
    tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
  } catch (err) {
    return { unavailable: `no per-thread priority here (/proc/thread-self: ${(err as NodeJS.ErrnoException).code})` };
  }
  if (!Number.isSafeInteger(tid) || tid <= 0) return { unavailable: 'no thread id in /proc/thread-self' };
  try {
    setPriority(tid, Math.min(LOWEST, getPriority(tid) + by));
    return { tid, nice: getPriority(tid) };
  } catch (err) {
    // Node's SystemError keeps the errno name (EACCES, EPERM) in `info`.
    const e = err as Error & { info?: { code?: string } };
    return { unavailable: `setpriority refused (${e.info?.code ?? e.message})` };
  }
}
