import { createConnection } from 'node:net';
import { freePort } from './free-port.js';
import { ServerProcess, removeDir, scratchDir } from './server-process.js';
import { ServerNotReadyError } from '../../errors.js';

/** A throwaway redis-server. restart() keeps the port and the data directory. */
export interface TestRedis {
  readonly url: string;
  readonly port: number;
  readonly dir: string;
  /** The process, for its pid or log tail. */
  readonly server: ServerProcess;
  /** Graceful stop (SIGTERM): Redis flushes the AOF if it has one. */
  stop(): Promise<void>;
  /** SIGKILL: no shutdown work. */
  kill(): Promise<void>;
  /** SIGSTOP: the port stays open, nothing answers. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Stop ('stop' by default, or 'kill') and start again on the same port with the same dir. */
  restart(how?: 'stop' | 'kill'): Promise<void>;
  /** Kill the server and remove its directory. */
  cleanup(): Promise<void>;
}

/**
 * A redis-server from PATH on a free 127.0.0.1 port, its data in a scratch directory. No RDB
 * snapshots (--save ""); an append-only file with fsync on every write only when asked, so a
 * restart loses everything unless `appendonly`. Never the machine's shared Redis.
 */
export async function startRedis(options: { appendonly?: boolean } = {}): Promise<TestRedis> {
  const port = await freePort();
  const dir = scratchDir('redis');
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', ''];
  args.push('--appendonly', options.appendonly ? 'yes' : 'no');
  if (options.appendonly) args.push('--appendfsync', 'always');
  const server = new ServerProcess({ label: 'redis', command: 'redis-server', args, ready: () => ping(port) }, dir);
  try {
    await server.start();
  } catch (err) {
    removeDir(dir);
    throw err;
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    dir,
    server,
    stop: () => server.stop(),
    kill: () => server.kill(),
    pause: () => server.pause(),
    resume: () => server.resume(),
    restart: (how) => server.restart(how),
    async cleanup() {
      await server.kill();
      removeDir(dir);
    },
  };
}

/** Resolves once the server answers PING with PONG (a LOADING server answers an error). */
function ping(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    const fail = (err: Error) => {
      socket.destroy();
      reject(err);
    };
    socket.setTimeout(500, () => fail(new ServerNotReadyError('redis', 'no PONG within 500 ms')));
    socket.once('error', fail);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => {
      socket.destroy();
      if (data.toString().startsWith('+PONG')) resolve();
      else reject(new ServerNotReadyError('redis', `PING answered ${data.toString().trim()}`));
    });
  });
}
