/**
 * The routes outside /api: the console page and its files (vendored libraries, the workflow page),
 * the probes (/healthz reads no database, /readyz shares one check among callers) and the
 * Prometheus metrics (a read under the cap).
 */
import { z } from 'zod';
import { defineRoute, type AdminRoute } from './admin-route.js';
import { consoleAsset, consoleAssets, type ConsoleAssetName } from './console-assets.js';
import { health, readiness } from './probes.js';

const assetNames = Object.keys(consoleAssets) as [ConsoleAssetName, ...ConsoleAssetName[]];
const assetParams = z.object({ file: z.enum(assetNames, `must be one of ${assetNames.join(', ')}`) });

export const serviceRoutes: AdminRoute[] = [
  {
    method: 'GET',
    path: '/',
    access: 'open',
    summary: 'the console: leader, members, jobs, runs and elections on one page',
    handle: async (c, _req, reply) => {
      const page = await c.consolePage();
      return reply
        .type('text/html; charset=utf-8')
        .header('cache-control', 'no-store')
        .header('content-security-policy', page.csp)
        .send(page.html);
    },
  },
  defineRoute({
    method: 'GET',
    path: '/assets/:file',
    access: 'open',
    summary:
      "the console's files: `uplot.js`, `uplot.css`, `dagre.js` (vendored); `history.js`, `workflow.js`, `workflow-model.js`, `workflow.css`",
    params: assetParams,
    handle: async (_c, _req, reply, { file }) => {
      const asset = await consoleAsset(file);
      return reply.type(asset.type).header('cache-control', asset.cache).send(asset.body);
    },
  }),
  {
    method: 'GET',
    path: '/healthz',
    access: 'open',
    summary: "liveness: 503 when this replica leads past its lease deadline, or its scheduler's event loop is silent",
    handle: async (c, _req, reply) => {
      // Served from the admin thread: a scheduler thread that stopped answering is not healthy.
      const answer = health(c.replica, c.replica.stalled?.());
      return reply.code(answer.status).send(answer.body);
    },
  },
  {
    method: 'GET',
    path: '/readyz',
    access: 'open',
    summary: 'readiness: 503 naming the check that failed (lease backend, database)',
    handle: async (c, _req, reply) => {
      const answer = await readiness(c.readiness);
      return reply.code(answer.status).send(answer.body);
    },
  },
  {
    method: 'GET',
    path: '/metrics',
    access: 'open',
    summary: 'Prometheus metrics, in the text format',
    handle: async (c, req, reply) =>
      reply.type(c.metrics.contentType).send(await c.read(req, () => c.metrics.exposition())),
  },
];
