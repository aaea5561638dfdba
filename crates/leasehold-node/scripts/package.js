// The package.json of a package scripts/dist packs, from this package's:
//
//   node scripts/package.js platform DIR PLATFORM VERSION   # leasehold-PLATFORM
//   node scripts/package.js main DIR VERSION                # leasehold
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const PLATFORMS = ['linux-x64-gnu', 'linux-x64-musl', 'linux-arm64-gnu', 'linux-arm64-musl'];
const main = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'package.json'), 'utf8'));
const [kind, dir, ...rest] = process.argv.slice(2);

let out;
if (kind === 'platform') {
  const [platform, version] = rest;
  if (!PLATFORMS.includes(platform)) throw new Error(`no such platform: ${platform}`);
  const [, cpu, libc] = platform.split('-');
  out = {
    name: `leasehold-${platform}`,
    version,
    description: `The native part of leasehold for ${platform}: its Node.js addon and the static leasehold command`,
    license: main.license,
    repository: main.repository,
    main: `leasehold.${platform}.node`,
    files: [`leasehold.${platform}.node`, 'bin/'],
    os: ['linux'],
    cpu: [cpu],
    libc: [libc === 'gnu' ? 'glibc' : 'musl'],
  };
} else if (kind === 'main') {
  const [version] = rest;
  out = { ...main, version };
  delete out.scripts;
  delete out.devDependencies;
  out.bin = { leasehold: 'bin/leasehold.js' };
  // Every platform's package: npm installs the one that fits this machine.
  out.optionalDependencies = Object.fromEntries(PLATFORMS.map((p) => [`leasehold-${p}`, version]));
} else {
  throw new Error('usage: node scripts/package.js platform DIR PLATFORM VERSION | main DIR VERSION');
}
fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify(out, null, 2) + '\n');
