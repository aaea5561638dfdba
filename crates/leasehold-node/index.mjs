// ESM entry: the CommonJS module's names (index.js lists each once).
export * from './index.js';
export { default } from './index.js';
