#!/usr/bin/env node
// `npx leasehold …` and `leasehold` in npm scripts: the static `leasehold`
// command the platform package carries (the release archive's very file),
// run with this process's arguments, stdio and environment. Signals sent
// to this process are passed on, and it ends as the command ended (its
// exit code, or the same signal).
'use strict';
const { spawn } = require('node:child_process');
const path = require('node:path');
const { platform } = require('../lib/platform.js');

let command;
try {
  command = path.join(path.dirname(require.resolve(`leasehold-${platform()}/package.json`)), 'bin', 'leasehold');
} catch (e) {
  console.error(`leasehold: the platform package leasehold-${platform()} is not installed: ${e.message}`);
  process.exit(127);
}
const child = spawn(command, process.argv.slice(2), { stdio: 'inherit' });
for (const signal of ['SIGTERM', 'SIGHUP', 'SIGINT', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2']) {
  // A terminal's ^C reaches the command too (same process group); passing
  // SIGINT on again would deliver it twice, so only from elsewhere.
  process.on(signal, () => {
    if (signal !== 'SIGINT' || !process.stdin.isTTY) child.kill(signal);
  });
}
child.on('error', (e) => {
  console.error(`leasehold: cannot run ${command}: ${e.message}`);
  process.exit(127);
});
child.on('exit', (code, signal) => {
  if (signal) {
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  } else {
    process.exit(code);
  }
});
