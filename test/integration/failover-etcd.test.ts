import { it } from 'node:test';
import assert from 'node:assert/strict';
import { startEtcd } from '../support/etcd-server.js';
import { runFailoverScenario } from './failover-scenario.js';

it(
  'etcd backend: three replicas, graceful and abrupt leader stops, exactly one run per second',
  { timeout: 180_000 },
  async () => {
    const etcd = await startEtcd();
    try {
      const report = await runFailoverScenario(() => ({ kind: 'etcd', endpoints: etcd.endpoints }));
      console.log('etcd failover:', JSON.stringify(report));
      assert.ok(report.runs >= 90);
    } finally {
      await etcd.cleanup();
    }
  },
);
