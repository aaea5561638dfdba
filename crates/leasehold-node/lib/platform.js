// The platform package's suffix for this machine: linux-x64-gnu,
// linux-arm64-musl, … (darwin-arm64 and the like elsewhere: no package).
'use strict';

function libc() {
  // glibc reports its version to process.report; musl (Alpine) does not.
  const header = process.report?.getReport?.().header ?? {};
  return header.glibcVersionRuntime ? 'gnu' : 'musl';
}

function platform() {
  if (process.platform !== 'linux') return `${process.platform}-${process.arch}`;
  return `linux-${process.arch}-${libc()}`;
}

module.exports = { platform };
