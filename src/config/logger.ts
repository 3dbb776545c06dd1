import { pino, type DestinationStream, type Logger } from 'pino';
import { InvalidConfigError } from '../errors.js';
import type { LogFormat } from './settings.js';

/**
 * The replica's logger. 'json' (the default) is pino's own output: one object a line, nothing to
 * install. 'pretty' formats each line for a person at a terminal through pino-pretty, an optional
 * peer dependency: development machines install it, production images need not carry it.
 * `destination` is where the lines go (stdout by default).
 */
export async function createLogger(
  o: { logLevel: string; logFormat: LogFormat },
  destination?: DestinationStream,
): Promise<Logger> {
  const options = { level: o.logLevel, base: { pid: process.pid } };
  if (o.logFormat === 'json') return destination ? pino(options, destination) : pino(options);
  const pretty = await loadPinoPretty();
  return pino(
    options,
    pretty({
      colorize: destination === undefined && process.stdout.isTTY,
      translateTime: 'SYS:yyyy-mm-dd HH:MM:ss.l o',
      ignore: 'pid,hostname',
      // Synchronous, as pino's default destination is: nothing is lost when the process exits.
      sync: true,
      ...(destination ? { destination } : {}),
    }),
  );
}

async function loadPinoPretty(): Promise<typeof import('pino-pretty').build> {
  try {
    return (await import('pino-pretty')).build;
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code !== 'ERR_MODULE_NOT_FOUND' || !e.message.includes("'pino-pretty'")) throw err;
    throw new InvalidConfigError(
      'logFormat',
      'the pretty log format needs the pino-pretty package, which is not installed: run `npm i -D pino-pretty` in your application, or use --log-format json',
    );
  }
}
