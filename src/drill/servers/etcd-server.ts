import { freePort } from './free-port.js';
import { ServerProcess, removeDir, scratchDir } from './server-process.js';
import { ServerNotReadyError } from '../../errors.js';

export interface TestEtcd {
  /** Client URLs of every member. */
  endpoints: string[];
  members: ServerProcess[];
  cleanup(): Promise<void>;
}

/**
 * Throwaway etcd members on free loopback ports (never 2379/2380), with short raft timings so
 * tests run fast: heartbeat 50 ms, election 500 ms, which also lets etcd grant 1 s leases.
 */
export async function startEtcdCluster(size = 3): Promise<TestEtcd> {
  const ports = await Promise.all(
    Array.from({ length: size }, async () => ({ client: await freePort(), peer: await freePort() })),
  );
  const names = ports.map((_, i) => `m${i}`);
  const initialCluster = ports.map((p, i) => `${names[i]}=http://127.0.0.1:${p.peer}`).join(',');
  const token = `cw-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
  const dirs: string[] = [];
  const members = ports.map((p, i) => {
    const dir = scratchDir(`etcd-${names[i]}`);
    dirs.push(dir);
    const clientUrl = `http://127.0.0.1:${p.client}`;
    return new ServerProcess(
      {
        label: `etcd-${names[i]}`,
        command: 'etcd',
        args: [
          '--name',
          names[i]!,
          '--data-dir',
          `${dir}/data`,
          '--listen-client-urls',
          clientUrl,
          '--advertise-client-urls',
          clientUrl,
          '--listen-peer-urls',
          `http://127.0.0.1:${p.peer}`,
          '--initial-advertise-peer-urls',
          `http://127.0.0.1:${p.peer}`,
          '--initial-cluster',
          initialCluster,
          '--initial-cluster-state',
          'new',
          '--initial-cluster-token',
          token,
          '--heartbeat-interval',
          '50',
          '--election-timeout',
          '500',
          '--logger',
          'zap',
          '--log-level',
          'error',
        ],
        env: { ETCD_UNSUPPORTED_ARCH: process.arch === 'x64' ? undefined : process.arch },
        ready: () => health(clientUrl),
        readyTimeoutMs: 30_000,
      },
      dir,
    );
  });
  // Members of a new cluster wait for each other: start them together.
  await Promise.all(members.map((m) => m.start()));
  return {
    endpoints: ports.map((p) => `http://127.0.0.1:${p.client}`),
    members,
    async cleanup() {
      await Promise.all(members.map((m) => m.kill()));
      for (const d of dirs) removeDir(d);
    },
  };
}

/** One member: the fast path for most tests. */
export function startEtcd(): Promise<TestEtcd> {
  return startEtcdCluster(1);
}

async function health(url: string): Promise<void> {
  const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) });
  const body = (await res.json()) as { health?: string };
  if (body.health !== 'true') throw new ServerNotReadyError(`etcd at ${url}`, `health is ${JSON.stringify(body)}`);
}
