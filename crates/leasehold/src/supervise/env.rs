//! The environment a supervised command starts with: which grant (or which
//! claimed task) it runs under, as named fields. [`CommandEnv::vars`] is
//! the one place that spells them as variables (`LEASEHOLD_TOKEN`, …);
//! the guard protocol carries those pairs, and docs/RUN-AND-LOCK.md lists
//! them.

use super::guard::protocol::Env;
use crate::{Claim, Grant, LeaseName, QueueName, Store, TaskId, Token};

/// What a command is told about the grant or claim it runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandEnv {
    /// A command under a lease (`leasehold run`, Python's `store.run`, a
    /// schedule's slot).
    Lease {
        /// `LEASEHOLD_NAME`.
        name: LeaseName,
        /// `LEASEHOLD_TOKEN`.
        token: Token,
        /// `LEASEHOLD_GRANT`: the grant's id (token and acquisition).
        grant: String,
        /// `LEASEHOLD_OWNER`.
        owner: String,
        /// `LEASEHOLD_STORE`: the store's URL.
        store: String,
        /// The caller's own variables, added last (a name given twice
        /// takes the caller's value).
        extra: Vec<(String, String)>,
    },
    /// A claimed task's command (`leasehold work`).
    Task {
        /// `LEASEHOLD_QUEUE`.
        queue: QueueName,
        /// `LEASEHOLD_TASK_ID`.
        id: TaskId,
        /// `LEASEHOLD_TASK_TOKEN`.
        token: Token,
        /// `LEASEHOLD_TASK_ATTEMPT`.
        attempt: u32,
        /// `LEASEHOLD_STORE`: the store's URL.
        store: String,
    },
}

impl CommandEnv {
    /// The variables a command under a lease is told its grant by, in
    /// [`CommandEnv::vars`]'s order: a host refuses them as the caller's
    /// own ([`super::env_refusal`]).
    pub const LEASE_VARS: [&'static str; 5] = [
        "LEASEHOLD_NAME",
        "LEASEHOLD_TOKEN",
        "LEASEHOLD_GRANT",
        "LEASEHOLD_OWNER",
        "LEASEHOLD_STORE",
    ];

    /// The environment of a command under `grant` of `name` in `store`,
    /// with the caller's `extra` variables.
    #[must_use]
    pub fn of_grant(store: &Store, name: &LeaseName, grant: &Grant, extra: &[(String, String)]) -> Self {
        Self::Lease {
            name: name.clone(),
            token: grant.token,
            grant: grant.id().to_string(),
            owner: grant.owner.clone(),
            store: store.url().to_string(),
            extra: extra.to_vec(),
        }
    }

    /// The environment of a claimed task's command.
    #[must_use]
    pub fn of_claim(store: &Store, claim: &Claim) -> Self {
        Self::Task {
            queue: claim.queue.clone(),
            id: claim.id.clone(),
            token: claim.token,
            attempt: claim.attempt,
            store: store.url().to_string(),
        }
    }

    /// The variables, as the command sees them.
    #[must_use]
    pub fn vars(&self) -> Vec<(String, String)> {
        let var = |name: &str, value: String| (name.to_owned(), value);
        match self {
            Self::Lease {
                name,
                token,
                grant,
                owner,
                store,
                extra,
            } => {
                let [name_var, token_var, grant_var, owner_var, store_var] = Self::LEASE_VARS;
                let mut vars = vec![
                    var(name_var, name.to_string()),
                    var(token_var, token.to_string()),
                    var(grant_var, grant.clone()),
                    var(owner_var, owner.clone()),
                    var(store_var, store.clone()),
                ];
                vars.extend(extra.iter().cloned());
                vars
            }
            Self::Task {
                queue,
                id,
                token,
                attempt,
                store,
            } => vec![
                var("LEASEHOLD_QUEUE", queue.to_string()),
                var("LEASEHOLD_TASK_ID", id.to_string()),
                var("LEASEHOLD_TASK_TOKEN", token.to_string()),
                var("LEASEHOLD_TASK_ATTEMPT", attempt.to_string()),
                var("LEASEHOLD_STORE", store.clone()),
            ],
        }
    }

    /// The variables as the guard's `env` message carries them (a name
    /// given twice: the later value).
    pub(crate) fn protocol(&self) -> Env {
        self.vars().into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_callers_variables_come_last_and_win() {
        let env = CommandEnv::Lease {
            name: LeaseName::new("job").unwrap(),
            token: Token(7),
            grant: "7-abc".into(),
            owner: "me".into(),
            store: "sqlite:///x".into(),
            extra: vec![("EXTRA".into(), "1".into()), ("LEASEHOLD_OWNER".into(), "them".into())],
        };
        let protocol = env.protocol();
        assert_eq!(protocol["LEASEHOLD_TOKEN"], "7");
        assert_eq!(protocol["LEASEHOLD_GRANT"], "7-abc");
        assert_eq!(protocol["EXTRA"], "1");
        assert_eq!(
            protocol["LEASEHOLD_OWNER"], "them",
            "as the JSON object's insertion did"
        );
    }
}
