// The throwaway-server harness lives in src/drill/servers (the failover drill uses it too).
export * from '../../src/drill/servers/server-process.js';
