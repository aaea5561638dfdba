//! A store whose token counters were damaged never issues a token at or
//! below one it issued, and says it is damaged (issue 39, item 11): on
//! SQLite and on PostgreSQL, whose counters are the same table.

use leasehold_testkit::postgres;

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] =
    leasehold_testkit::tests![a_damaged_token_counter_is_refused_never_issued_from];

/// The ways the damage shows: the `lease_name` row gone, its key
/// damaged (the name no longer found), its counter lowered.
const DAMAGE: [(&str, &str); 3] = [
    ("row deleted", "DELETE FROM lease_name WHERE name = 'job'"),
    ("key damaged", "UPDATE lease_name SET name = 'jo#' WHERE name = 'job'"),
    (
        "counter lowered",
        "UPDATE lease_name SET last_token = 1 WHERE name = 'job'",
    ),
];

/// A store to damage: its sandbox and how to run SQL on its tables.
struct Store {
    what: &'static str,
    env: Env,
    sql: Box<dyn Fn(&str)>,
}

fn sqlite() -> Store {
    let env = Env::new();
    let path = env.store_path();
    Store {
        what: "sqlite",
        env,
        sql: Box::new(move |sql| {
            rusqlite::Connection::open(&path).unwrap().execute_batch(sql).unwrap();
        }),
    }
}

fn postgres() -> Store {
    let server = postgres::Server::shared();
    let schema = postgres::Server::fresh_schema();
    Store {
        what: "postgres",
        env: Env::on(server.url(&schema)),
        sql: Box::new(move |sql| {
            let mut client = server.client();
            client
                .batch_execute(&format!("SET search_path = {schema}; {sql}"))
                .unwrap();
        }),
    }
}

fn a_damaged_token_counter_is_refused_never_issued_from() {
    for (what, sql) in DAMAGE {
        for store in [sqlite(), postgres()] {
            let (env, what) = (&store.env, format!("{what} ({})", store.what));
            let mut issued = Vec::new();
            for _ in 0..3 {
                let token = env.acquire(&["job"]);
                assert_eq!(env.run(&["release", "job", "--token", &token.to_string()]).0, 0);
                issued.push(token);
            }
            (store.sql)(sql);
            // What must never happen: a token at or below one already issued.
            let (code, out, err) = env.run(&["acquire", "job"]);
            if let Ok(token) = out.trim().parse::<u64>() {
                assert!(
                    issued.iter().all(|t| token > *t),
                    "{what}: token {token} issued again after {issued:?}"
                );
            }
            assert_eq!(code, 65, "{what}: {out} {err}");
            assert!(
                err.contains("token counter of job") && err.contains("--bump-tokens"),
                "{what}: {err}"
            );
            // Not "never granted": status says the store is damaged.
            let (code, out, err) = env.run(&["status", "job"]);
            assert_eq!(code, 65, "{what}: status said {out} {err}");
            assert!(err.contains("history records token 3 granted"), "{what}: {err}");
            let (code, out, _) = env.run(&["doctor"]);
            assert_ne!(code, 0, "{what}: doctor passed: {out}");
            assert!(out.contains("token counter of job"), "{what}: {out}");
            // The repair the message names: a bump above every issued token.
            assert_eq!(env.run(&["migrate", "--bump-tokens", "100"]).0, 0, "{what}");
            let token = env.acquire(&["job"]);
            assert!(token > 100, "{what}: {token} after the bump");
            let (code, out, _) = env.run(&["doctor"]);
            assert_eq!(code, 0, "{what}: {out}");
        }
    }
}
