// The examples (examples/*.mts, *.cts) as TypeScript users meet them:
// type-checked by `tsc --strict` against index.d.ts, then compiled and
// run, importing the package by its name, on a throwaway store.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { CI, packageDir, tempDir } from './support.mjs';

const tools = process.env.LEASEHOLD_NODE_TOOLS;

test('the examples type-check under tsc --strict and run', { timeout: 120_000 }, (t) => {
  if (!tools) {
    const why = 'LEASEHOLD_NODE_TOOLS names no TypeScript install (scripts/test installs one under target/node-tools)';
    if (CI) assert.fail(`CI=true, and this test cannot run here: ${why}`);
    t.skip(why);
    return;
  }
  const tsc = path.join(tools, 'node_modules', '.bin', 'tsc');
  const typeRoots = path.join(tools, 'node_modules', '@types');
  const config = path.join(packageDir, 'tsconfig.json');
  // The check: nothing emitted, every error a failure with tsc's words.
  execFileSync(tsc, ['-p', config, '--typeRoots', typeRoots], { encoding: 'utf8' });
  const dir = tempDir();
  const out = path.join(dir, 'out');
  execFileSync(tsc, ['-p', config, '--typeRoots', typeRoots, '--noEmit', 'false', '--outDir', out], { encoding: 'utf8' });
  mkdirSync(path.join(dir, 'node_modules'));
  symlinkSync(packageDir, path.join(dir, 'node_modules', 'leasehold'));
  const examples = readdirSync(out).filter((f) => /\.[mc]js$/.test(f));
  assert.ok(examples.length >= 2, `compiled: ${examples}`);
  for (const example of examples) {
    // Each in a directory of its own, with a store of its own: the files
    // it writes (relative names) start afresh.
    const cwd = path.join(dir, example.replace(/\W/g, '-'));
    mkdirSync(cwd);
    const file = path.join(dir, example);
    execFileSync('cp', [path.join(out, example), file]);
    const printed = execFileSync(process.execPath, [file], {
      cwd,
      encoding: 'utf8',
      env: { ...process.env, LEASEHOLD_STORE: `sqlite://${path.join(cwd, 'store.db')}` },
    });
    assert.match(printed, /token/, `${example} printed: ${printed}`);
  }
});
