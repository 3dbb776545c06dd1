/**
 * CPU time of this process and of server processes, from /proc (Linux): the benchmarks charge a
 * run with what PostgreSQL, Redis and Node spent on it, each measured on its own.
 */
import { readFileSync } from 'node:fs';

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

/**
 * utime + stime of `pids`, in ms, with the CPU of their children that exited and were reaped
 * (cutime + cstime): a PostgreSQL backend that ends mid-round is counted through the postmaster,
 * instead of its CPU vanishing from the sum (which once made a round's PostgreSQL CPU negative).
 */
export function cpuMsOf(pids: readonly number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      // The command may contain spaces and parentheses: fields start after the last ')'.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
    } catch {
      // gone: its CPU is its parent's cutime/cstime now (counted above when the parent is listed)
    }
  }
  return (ticks * 1000) / TICKS_PER_SECOND;
}

/** This process's CPU (user + system), in ms. */
export function ownCpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** The machine's 1-minute load average. */
export function loadAverage(): number {
  return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
}
