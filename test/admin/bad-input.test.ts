/**
 * Bad input to the admin API is a clear 4xx, fast, with nothing written (issue 25, items 5-8 and
 * 11): JSON nested thousands deep, NUL and lone surrogates in a payload or a one-off key, numbers
 * JSON cannot hold, malformed run ids, cursors and instants, and schedule ids no URL can reach.
 * One in-process replica with its admin thread, a real ledger.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { ADMIN_TOKEN, Cluster, firstLeader, type Node } from './support.js';

let db: TestDatabase;
let cluster: Cluster;
let node: Node;

before(async () => {
  db = await createTestDatabase();
  cluster = new Cluster(db.url, db.schema);
  node = await cluster.add('bad-a');
  await firstLeader([node.replica]);
});
after(async () => {
  await cluster?.stopAll();
  await db?.drop();
});

interface Answer {
  status: number;
  code?: string;
  error?: string;
  ms: number;
}

async function call(method: string, path: string, body?: string): Promise<Answer> {
  const t = performance.now();
  const headers: Record<string, string> = { authorization: `Bearer ${ADMIN_TOKEN}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${node.url}${path}`, { method, headers, body, signal: AbortSignal.timeout(5000) });
  const json = (await res.json()) as { code?: string; error?: string };
  return { status: res.status, code: json.code, error: json.error, ms: performance.now() - t };
}

async function stored(): Promise<{ schedules: number; onceRuns: number }> {
  const s = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM cw_schedules WHERE version > 0');
  const r = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM cw_runs WHERE trigger = 'once'");
  return { schedules: s.rows[0]!.n, onceRuns: r.rows[0]!.n };
}

/** Sends each body; each must be a 400 within 2 s naming `field`, and the ledger must be as before. */
async function refused(method: string, path: string, bodies: string[], field: RegExp): Promise<void> {
  const before = await stored();
  for (const body of bodies) {
    const a = await call(method, path, body);
    assert.equal(a.status, 400, `${path} ${body.slice(0, 60)}: ${a.status} ${a.error}`);
    assert.equal(a.code, 'bad_request');
    assert.match(a.error ?? '', field, body.slice(0, 60));
    assert.ok(a.ms < 2000, `${path} answered in ${a.ms.toFixed(0)} ms`);
  }
  assert.deepEqual(await stored(), before, 'nothing was written');
}

const schedule = (extra: string) => `{"id":"bad","handler":"tick","schedule":"* * * * *"${extra}}`;
const deepArray = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
const deepObject = (n: number) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;

describe('bodies', () => {
  it('JSON nested 3,000-4,000 deep is a 400 at once, on both routes that take a payload', async () => {
    await refused(
      'POST',
      '/api/schedules',
      [schedule(`,"payload":${deepArray(3000)}`), schedule(`,"payload":${deepArray(4000)}`)],
      /nested deeper than \d+ levels/,
    );
    await refused(
      'POST',
      '/api/jobs/tick/once',
      [`{"key":"k","payload":${deepArray(3500)}}`, `{"key":"k","payload":${deepObject(1500)}}`],
      /nested deeper than \d+ levels/,
    );
    // Brackets inside strings are text, not nesting.
    const ok = await call('POST', '/api/jobs/tick/once', `{"key":"brackets","payload":"${'['.repeat(3000)}"}`);
    assert.equal(ok.status, 201);
  });

  it('a payload may nest 32 levels, not 33', async () => {
    await refused('POST', '/api/jobs/tick/once', [`{"key":"k","payload":${deepArray(33)}}`], /at most 32/);
    assert.equal(
      (await call('POST', '/api/jobs/tick/once', `{"key":"deep32","payload":${deepArray(32)}}`)).status,
      201,
    );
  });

  it('NUL and lone surrogates in a payload or a one-off key are 400, not a PostgreSQL error', async () => {
    await refused(
      'POST',
      '/api/jobs/tick/once',
      [
        `{"key":"k","payload":"a\\u0000b"}`,
        `{"key":"k","payload":{"x":["\\ud800"]}}`,
        `{"key":"k","payload":{"\\u0000":1}}`,
      ],
      /^payload: must not contain (the NUL character|a lone UTF-16 surrogate)/,
    );
    await refused(
      'POST',
      '/api/jobs/tick/once',
      ['{"key":"k\\u0000"}', '{"key":"k\\ud800"}', '{"key":"k\\udc00x"}', '{"key":"a\\u001b[2Kb"}'],
      /^key: must not contain/,
    );
    await refused(
      'POST',
      '/api/schedules',
      [schedule(',"payload":{"a":"\\u0000"}'), schedule(',"payload":"\\udbff"')],
      /payload: must not contain/,
    );
    // A well-formed pair is fine.
    assert.equal(
      (await call('POST', '/api/jobs/tick/once', '{"key":"pair \\ud83d\\ude00","payload":"\\ud83d\\ude00"}')).status,
      201,
    );
  });

  it('a number JSON cannot hold (1e400) is refused, not stored as null', async () => {
    await refused(
      'POST',
      '/api/schedules',
      [schedule(',"payload":{"a":1e400}')],
      /payload: must hold only finite numbers/,
    );
    await refused(
      'POST',
      '/api/jobs/tick/once',
      ['{"key":"k","payload":[-1e400]}'],
      /payload: must hold only finite numbers/,
    );
  });

  it('schedule ids "." and ".." are refused with the id rule', async () => {
    for (const id of ['.', '..', '-x']) {
      await refused(
        'POST',
        '/api/schedules',
        [`{"id":${JSON.stringify(id)},"handler":"tick","schedule":"* * * * *"}`],
        /schedule id: must start with a letter or digit/,
      );
    }
    assert.equal((await call('POST', '/api/schedules', schedule('').replace('"bad"', '"a.b"'))).status, 201);
  });
});

describe('paths and queries', () => {
  it('malformed run ids, cursors and instants are 400 naming the field; an unknown run is 404', async () => {
    const cases: [string, string, RegExp][] = [
      ['GET', '/api/runs/abc', /^id: must be a run id/],
      ['GET', '/api/runs/1e3', /^id: must be a run id/],
      ['GET', '/api/runs/%EF%BC%91', /^id: must be a run id/],
      ['GET', '/api/runs/0', /^id: must be a run id/],
      ['GET', '/api/runs?cursor=9999999999999999999.1', /^cursor: must be the nextCursor/],
      ['GET', '/api/runs?cursor=1.99999999999999999999', /^cursor: must be the nextCursor/],
      ['GET', '/api/runs?from=-271821-04-20T00:00:00Z', /^from: must be an ISO 8601 instant/],
      ['GET', '/api/runs?to=275760-09-13T00:00:00Z', /^to: must be an ISO 8601 instant/],
      ['GET', '/api/runs?q=tick@-271821-04-20T00:00:00Z', /^q: must be a run id/],
      ['POST', '/api/runs/abc/retry', /^id: must be a run id/],
      ['GET', '/api/schedules/..%2F', /^id: may contain only/],
      ['POST', '/api/jobs/a%20b/trigger', /^name: must be a job name/],
    ];
    for (const [method, path, error] of cases) {
      const a = await call(method, path);
      assert.equal(a.status, 400, `${method} ${path}: ${a.status} ${a.error}`);
      assert.match(a.error ?? '', error, `${method} ${path}`);
    }
    const missing = await call('GET', '/api/runs/9223372036854775807');
    assert.equal(missing.status, 404);
    assert.equal(missing.code, 'unknown_run');
  });

  it('the runs filter takes every trigger', async () => {
    for (const trigger of ['schedule', 'catchup', 'manual', 'standin', 'backfill', 'once']) {
      const a = await call('GET', `/api/runs?trigger=${trigger}`);
      assert.equal(a.status, 200, `${trigger}: ${a.error}`);
    }
    const once = (await (await fetch(`${node.url}/api/runs?trigger=once`)).json()) as { runs: { trigger: string }[] };
    assert.ok(once.runs.length > 0 && once.runs.every((r) => r.trigger === 'once'));
    assert.match((await call('GET', '/api/runs?trigger=nope')).error ?? '', /standin, backfill, once/);
  });
});
