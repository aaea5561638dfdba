// Loads the native addon: $LEASEHOLD_NODE_ADDON (a path: the test suites
// point it at the workspace build), else the one beside this file (a
// build from source), else the platform package npm installed with this
// one (optionalDependencies: exactly one matches this machine).
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { platform } = require('./platform.js');

/** The addon's file. */
function locate() {
  const given = process.env.LEASEHOLD_NODE_ADDON;
  if (given) return path.resolve(given);
  const here = path.join(__dirname, '..', `leasehold.${platform()}.node`);
  if (fs.existsSync(here)) return here;
  const name = `leasehold-${platform()}`;
  try {
    return require.resolve(name);
  } catch (e) {
    const supported = ['linux-x64-gnu', 'linux-x64-musl', 'linux-arm64-gnu', 'linux-arm64-musl'];
    const message = supported.includes(platform())
      ? `leasehold: the platform package ${name} is not installed (npm installs it with leasehold unless optional ` +
        `dependencies were left out: npm install without --omit=optional, or npm install ${name}): ${e.message}`
      : `leasehold: no prebuilt package for ${platform()} (there are: ${supported.join(', ')}); build it from the ` +
        `repository (crates/leasehold-node, docs/NODE.md) and set LEASEHOLD_NODE_ADDON to the .node file`;
    throw new Error(message, { cause: e });
  }
}

const file = locate();
module.exports = require(file);
// Where the addon is: its package's programs are beside it (the guard of
// a supervised command, lib/run.js).
module.exports.dir = path.dirname(file);
