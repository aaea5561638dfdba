// The package from CommonJS (require), checked by tsc --strict too.
import leasehold = require('leasehold');

async function main(): Promise<void> {
  const store = new leasehold.Store();
  await store.withLease('cjs-example', { ttl: 10_000 }, async (lease) => {
    console.log(lease.name, 'token', lease.token);
  });
  store.close();
}

main().catch((e: unknown) => {
  if (e instanceof leasehold.LeaseholdError) console.error(e.code, e.message);
  process.exitCode = 1;
});
