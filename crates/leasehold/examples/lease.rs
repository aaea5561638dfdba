//! Take a lease, renew it, check the fence, and give it back.
//!
//!     cargo run -p leasehold --example lease -- /tmp/leasehold-example.db

use std::time::Duration;

use leasehold::{Acquire, AcquireOptions, LeaseFence, LeaseName, LeaseRenew, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/tmp/leasehold-example.db".into());
    let store = Store::open_sqlite(path.as_ref())?;
    let name = LeaseName::new("nightly-report")?;
    let options = AcquireOptions {
        ttl: Duration::from_secs(30),
        ..AcquireOptions::default()
    };

    let grant = match store.try_acquire(&name, &options)? {
        Acquire::Acquired(grant) => grant,
        Acquire::Held(held) => {
            eprintln!("held by {} (token {})", held.grants[0].owner, held.grants[0].token);
            std::process::exit(11);
        }
    };
    println!("acquired {name} with token {}", grant.token);

    match store.renew(&grant, options.ttl)? {
        LeaseRenew::Renewed(g) => println!("renewed; expires in {:?}", g.expires_in),
        LeaseRenew::Lost(reason) => return Err(format!("lost: {reason}").into()),
    }

    // Before a side effect, pass the fence: refused if a newer grant exists.
    match store.fence(&name, grant.token)? {
        LeaseFence::Passed(_) => println!("fence passed; publishing"),
        LeaseFence::Refused { reason, .. } => return Err(format!("refused: {reason}").into()),
    }

    store.release(&grant)?;
    println!("released");
    Ok(())
}
