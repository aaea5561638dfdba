//! Ending a kept task claim for a language package (Python's and Node's
//! `done()`, `fail()`, `release()`): stop the keeper, then report with the
//! claim's token unless the keeper already lost it — one compare-and-set,
//! so a claim that expired or was taken records nothing, and a task is
//! done at most once. The outcome is worded once for every front end.

use leasehold_backend::{Claim, Retry, TaskFail, TaskRef, TaskUpdate};
use leasehold_host as host;

use super::{ClaimKeeper, ClaimLost, Loss};
use crate::{Result, Store};

/// How to end a kept claim.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimReport {
    /// The task is done, with this result recorded.
    Done(Option<serde_json::Value>),
    /// A failed attempt, with this error recorded: retried as `Retry`
    /// says, dead once its attempts are used up.
    Fail(String, Retry),
    /// Hand the claim back without charging its attempt.
    HandBack,
}

/// The claim a message names: "claim of task QUEUE/ID (token T)".
#[must_use]
pub fn described_claim(claim: &Claim) -> String {
    format!("claim of task {}/{} (token {})", claim.queue, claim.id, claim.token)
}

/// Stop `keeper` and report `task` as `report` says, with the claim's
/// token. Returns the outcome's word — `done`, `retrying`, `dead` or
/// `released` — or the loss: the keeper's, or the store's refusal (the
/// claim ran past its TTL and may have been claimed again, or was ended
/// by someone else), when nothing was recorded. Blocking: a store round
/// trip.
///
/// # Errors
/// [`crate::Error::Store`] when the store fails (the claim then ends by
/// its TTL).
///
/// # Examples
/// See [`Store::claim_wait_and_keep`].
pub fn report_kept(
    store: &Store,
    task: &TaskRef,
    keeper: ClaimKeeper,
    report: ClaimReport,
) -> Result<std::result::Result<&'static str, Loss<ClaimLost>>> {
    // Whether a refusal could be an expiry: the store cannot expire the
    // claim before the last renewal's send time + TTL.
    let expiry = keeper.last_renewed().saturating_add(keeper.options().ttl);
    if let Some(loss) = keeper.stop() {
        return Ok(Err(loss));
    }
    let lost = |lost| Loss::Refused(ClaimLost::new(lost, host::boot_clock() >= expiry));
    Ok(match report {
        ClaimReport::Done(result) => match store.task_complete(task, result.as_ref())? {
            TaskUpdate::Applied => Ok("done"),
            TaskUpdate::Lost(l) => Err(lost(l)),
        },
        ClaimReport::Fail(error, retry) => match store.task_fail(task, &error, retry)? {
            TaskFail::Retrying { .. } => Ok("retrying"),
            TaskFail::Dead => Ok("dead"),
            TaskFail::Lost(l) => Err(lost(l)),
        },
        ClaimReport::HandBack => match store.task_release(task)? {
            TaskUpdate::Applied => Ok("released"),
            TaskUpdate::Lost(l) => Err(lost(l)),
        },
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use leasehold_backend::{TaskState, TaskUpdate};

    use super::*;
    use crate::{KeeperOptions, NewTask, QueueName};

    /// A report by a claim someone else ended (here: handed back with its
    /// token) records nothing and says the claim was taken; the claim that
    /// follows reports done once.
    #[test]
    fn a_report_by_a_claim_ended_elsewhere_records_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open_sqlite(&dir.path().join("q.db")).unwrap());
        let queue = QueueName::new("q").unwrap();
        store
            .task_add(&queue, vec![NewTask::new(serde_json::json!(1))])
            .unwrap();
        let keep = KeeperOptions::new(Duration::from_secs(60));
        let (claim, keeper) = store.claim_and_keep(&queue, None, keep.clone()).unwrap().unwrap();
        assert_eq!(store.task_release(&claim.task_ref()).unwrap(), TaskUpdate::Applied);
        let refused = report_kept(&store, &claim.task_ref(), keeper, ClaimReport::Done(None)).unwrap();
        assert_eq!(refused, Err(Loss::Refused(ClaimLost::Taken)));
        let task = store.task_get(&queue, &claim.id).unwrap().unwrap();
        assert_eq!(task.state, TaskState::Pending);

        let (again, keeper) = store.claim_and_keep(&queue, None, keep).unwrap().unwrap();
        assert!(again.token > claim.token);
        assert_eq!(
            report_kept(&store, &again.task_ref(), keeper, ClaimReport::Done(None)).unwrap(),
            Ok("done")
        );
        assert_eq!(
            described_claim(&again),
            format!("claim of task q/{} (token {})", again.id, again.token)
        );
    }
}
