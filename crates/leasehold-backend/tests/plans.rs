//! Properties of the lease planners (`leasehold_backend::plan`) on their
//! own: each plan is applied to a model store (vectors, no storage) and
//! the result checked against the rules — one exclusive live grant at
//! most, expired grants always removed and recorded, fast takeover only of
//! live listed tokens, listed waiters (and only those) leaving the queue
//! first, a grant only when FIFO admission allows it, a re-acquisition
//! keeps its token, renew and release only of the live token under the
//! owner rule, the queue's order kept.

use std::time::Duration;

use leasehold_backend::plan::{self, Acquire, Apply, Entry, Issued, NewGrant, NewWaiter, Op, Plan, Waiting};
use leasehold_backend::rules;
use leasehold_backend::{
    FenceRefusal, Grant, GrantId, HistoryEvent, Holder, LeaseAcquireParams, LeaseFence, LeaseFenceParams, LeaseName,
    LeaseReleaseParams, LeaseRenewParams, LostReason, Mode, Owner, QueuedWaiter, Token, WaiterTicket,
};
use proptest::prelude::*;

fn holder(i: usize) -> Holder {
    Holder {
        host: if i == 2 { "other".into() } else { "h".into() },
        boot_id: "b".into(),
        pid_ns: Some(1),
        pid: 40 + (i % 2) as u32,
        start_time: (i != 3).then_some(7),
        cmdline: String::new(),
        pgid: None,
        guard: None,
        bound: i != 4,
    }
}

const OWNERS: [&str; 3] = ["alice", "bob", "h:40"];

fn any_mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Exclusive),
        proptest::option::of(1..4u32).prop_map(|limit| Mode::Shared { limit }),
    ]
}

#[derive(Debug, Clone)]
struct Row {
    mode: Mode,
    owner: usize,
    explicit: bool,
    holder: usize,
    live: bool,
}

fn any_row() -> impl Strategy<Value = Row> {
    (any_mode(), 0..3usize, any::<bool>(), 0..5usize, any::<bool>()).prop_map(
        |(mode, owner, explicit, holder, live)| Row {
            mode,
            owner,
            explicit,
            holder,
            live,
        },
    )
}

fn grant(token: u64, r: &Row) -> Grant {
    Grant {
        name: LeaseName::new("n").unwrap(),
        token: Token(token),
        owner: OWNERS[r.owner].to_owned(),
        owner_explicit: r.explicit,
        mode: r.mode,
        holder: holder(r.holder),
        acquired_at: std::time::UNIX_EPOCH,
        ttl: Duration::from_secs(5),
        expires_in: Duration::ZERO,
    }
}

/// Grant rows with whether each is live, and the queue.
type State = (Vec<(Grant, bool)>, Vec<QueuedWaiter>);

/// A store state a correct store can be in: grant rows (tokens 1.., oldest
/// first) where a live exclusive grant is the only live one, and a queue.
fn any_state() -> impl Strategy<Value = State> {
    (
        proptest::collection::vec(any_row(), 0..6),
        proptest::collection::vec(any_mode(), 0..4),
    )
        .prop_map(|(rows, queue)| {
            let mut live: Vec<Mode> = Vec::new();
            let grants = rows
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let fits = r.mode.is_exclusive() && live.is_empty()
                        || !r.mode.is_exclusive() && !live.iter().any(|m| m.is_exclusive());
                    let is_live = r.live && fits;
                    if is_live {
                        live.push(r.mode);
                    }
                    (grant(i as u64 + 1, r), is_live)
                })
                .collect();
            let waiters = queue
                .into_iter()
                .enumerate()
                .map(|(i, mode)| QueuedWaiter {
                    ticket: WaiterTicket(100 + i as u64),
                    mode,
                    holder: (i != 1).then(|| holder(i)),
                })
                .collect();
            (grants, waiters)
        })
}

fn any_request() -> impl Strategy<Value = LeaseAcquireParams> {
    (
        any_row(),
        proptest::option::of(prop_oneof![98..104u64, Just(999u64)]),
        proptest::collection::vec(0..8u64, 0..3),
        proptest::collection::vec(prop_oneof![98..104u64, Just(999u64)], 0..3),
        proptest::option::of(0..5usize),
        any::<bool>(),
    )
        .prop_map(
            |(r, ticket, evict, evict_waiters, waiter, by_process)| LeaseAcquireParams {
                name: LeaseName::new("n").unwrap(),
                owner: Owner {
                    label: OWNERS[r.owner].to_owned(),
                    explicit: r.explicit,
                },
                mode: r.mode,
                ttl: Duration::from_secs(9),
                holder: holder(r.holder),
                ticket: ticket.map(WaiterTicket),
                waiter_ttl: Duration::from_secs(3),
                evict: evict.into_iter().map(Token).collect(),
                evict_waiters: evict_waiters.into_iter().map(WaiterTicket).collect(),
                waiter_holder: waiter.map(holder),
                reacquire_by_process: by_process,
            },
        )
}

/// A store made of vectors, checking that every op names what exists.
#[derive(Debug, Clone)]
struct Model {
    grants: Vec<(Token, Mode, bool, Duration)>,
    waiters: Vec<(WaiterTicket, Mode)>,
    last_token: u64,
    issued: Option<Token>,
    ticket: Option<WaiterTicket>,
    /// Who the registration it made records.
    enqueued: Option<Holder>,
    history: Vec<(HistoryEvent, Token)>,
    /// Grants written to, in order (a key is written once per transaction).
    touched: Vec<Token>,
}

impl Model {
    fn new(grants: &[(Grant, bool)], waiters: &[QueuedWaiter]) -> Self {
        Self {
            grants: grants.iter().map(|(g, live)| (g.token, g.mode, *live, g.ttl)).collect(),
            waiters: waiters.iter().map(|w| (w.ticket, w.mode)).collect(),
            last_token: grants.iter().map(|(g, _)| g.token.0).max().unwrap_or(0) + 10,
            issued: None,
            ticket: None,
            enqueued: None,
            history: Vec::new(),
            touched: Vec::new(),
        }
    }

    fn live(&self) -> Vec<Mode> {
        self.grants.iter().filter(|g| g.2).map(|g| g.1).collect()
    }

    fn find(&mut self, token: Token) -> Result<usize, String> {
        if self.touched.contains(&token) {
            return Err(format!("grant {token} written twice"));
        }
        self.touched.push(token);
        self.grants
            .iter()
            .position(|g| g.0 == token)
            .ok_or(format!("no grant {token}"))
    }
}

impl Apply for Model {
    type Error = String;

    fn remove_grant(&mut self, token: Token, live: bool) -> Result<(), String> {
        let i = self.find(token)?;
        if self.grants[i].2 != live {
            return Err(format!("grant {token} removed as live={live}"));
        }
        self.grants.remove(i);
        Ok(())
    }

    fn extend_grant(&mut self, token: Token, ttl: Duration, _: Option<&Holder>) -> Result<(), String> {
        let i = self.find(token)?;
        if !self.grants[i].2 {
            return Err(format!("extended grant {token} is not live"));
        }
        self.grants[i].3 = ttl;
        Ok(())
    }

    fn insert_grant(&mut self, g: &NewGrant) -> Result<(), String> {
        if self.issued.is_some() {
            return Err("two tokens issued".into());
        }
        self.last_token += 1;
        let token = Token(self.last_token);
        self.issued = Some(token);
        self.grants.push((token, g.mode, true, g.ttl));
        Ok(())
    }

    fn refresh_waiter(&mut self, ticket: WaiterTicket, _: Duration) -> Result<(), String> {
        self.waiters
            .iter()
            .any(|w| w.0 == ticket)
            .then_some(())
            .ok_or(format!("refreshed unknown ticket {ticket:?}"))
    }

    fn enqueue_waiter(&mut self, w: &NewWaiter) -> Result<(), String> {
        let ticket = WaiterTicket(self.waiters.iter().map(|w| w.0.0).max().unwrap_or(100) + 1000);
        self.ticket = Some(ticket);
        self.enqueued = Some(w.holder.clone());
        self.waiters.push((ticket, w.mode));
        Ok(())
    }

    fn remove_waiter(&mut self, ticket: WaiterTicket) -> Result<(), String> {
        let i = self
            .waiters
            .iter()
            .position(|w| w.0 == ticket)
            .ok_or(format!("removed unknown ticket {ticket:?}"))?;
        self.waiters.remove(i);
        Ok(())
    }

    fn record(&mut self, e: &Entry) -> Result<(), String> {
        if e.token == Issued::New && self.issued.is_none() {
            return Err("recorded the new token before issuing it".into());
        }
        let token = e.token.resolve(self.issued);
        self.history.push((e.event, token));
        Ok(())
    }
}

fn exclusive_alone(live: &[Mode]) -> bool {
    !live.iter().any(|m| m.is_exclusive()) || live.len() == 1
}

fn applied<T>(plan: &Plan<T>, model: &Model) -> Result<Model, TestCaseError> {
    let mut after = model.clone();
    plan.apply(&mut after).map_err(TestCaseError::fail)?;
    Ok(after)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn acquire_plans_keep_the_rules((grants, waiters) in any_state(), p in any_request()) {
        let plan = plan::acquire(&p, &grants, &waiters);
        let before = Model::new(&grants, &waiters);
        let after = applied(&plan, &before)?;

        // Never an exclusive live grant beside another.
        prop_assert!(exclusive_alone(&after.live()), "{:?}", after.grants);

        // Expired grants are removed, each with its entry.
        for (g, _) in grants.iter().filter(|(_, live)| !live) {
            prop_assert!(!after.grants.iter().any(|a| a.0 == g.token));
            prop_assert!(after.history.contains(&(HistoryEvent::Expired, g.token)));
        }
        // Fast takeover removes exactly the live grants listed in `evict`.
        let evicted: Vec<Token> = grants
            .iter()
            .filter(|(g, live)| *live && p.evict.contains(&g.token))
            .map(|(g, _)| g.token)
            .collect();
        for (g, live) in &grants {
            let removed = !after.grants.iter().any(|a| a.0 == g.token);
            prop_assert_eq!(removed, !live || evicted.contains(&g.token));
            prop_assert_eq!(
                after.history.contains(&(HistoryEvent::FastTakeover, g.token)),
                evicted.contains(&g.token)
            );
        }
        let live: Vec<&Grant> = grants
            .iter()
            .filter(|(g, live)| *live && !evicted.contains(&g.token))
            .map(|(g, _)| g)
            .collect();
        // Listed waiters leave first — only those queued, never the
        // acquirer's own — and the others keep their order.
        let queue: Vec<&QueuedWaiter> = waiters
            .iter()
            .filter(|w| !p.evict_waiters.contains(&w.ticket) || p.ticket == Some(w.ticket))
            .collect();
        let mine = p.ticket.and_then(|t| queue.iter().position(|w| w.ticket == t));
        let ahead = &queue[..mine.unwrap_or(queue.len())];
        let admitted = rules::admits(live.iter().map(|g| g.mode), ahead.iter().map(|w| w.mode), p.mode);
        let reacquirable = live
            .iter()
            .find(|g| rules::reacquires(&p, &g.owner, g.owner_explicit, g.mode, &g.holder).is_some());

        let issued = plan.ops.iter().filter(|op| matches!(op, Op::InsertGrant(_))).count();
        match &plan.outcome {
            Acquire::Acquired(Issued::Existing(token)) => {
                // Re-acquisition: the same token, extended, none issued.
                let g = reacquirable.expect("re-acquired a grant the rule allows");
                prop_assert_eq!(g.token, *token);
                prop_assert_eq!(issued, 0);
                prop_assert_eq!(after.last_token, before.last_token);
                prop_assert!(after.grants.iter().any(|a| a.0 == *token && a.2 && a.3 == p.ttl));
                prop_assert_eq!(after.history.last(), Some(&(HistoryEvent::Reacquired, *token)));
            }
            Acquire::Acquired(Issued::New) => {
                // A grant only when admitted, and nothing to re-acquire.
                prop_assert!(admitted);
                prop_assert!(reacquirable.is_none());
                prop_assert_eq!(issued, 1);
                let token = Token(before.last_token + 1);
                prop_assert_eq!(after.issued, Some(token));
                prop_assert_eq!(after.history.last(), Some(&(HistoryEvent::Granted, token)));
            }
            Acquire::Held(Waiting { live: held, waiters_ahead, ahead: listed, ticket }) => {
                prop_assert!(!admitted);
                prop_assert!(reacquirable.is_none());
                prop_assert_eq!(issued, 0);
                prop_assert_eq!(held, &live.iter().map(|g| g.token).collect::<Vec<_>>());
                prop_assert_eq!(*waiters_ahead as usize, ahead.len());
                prop_assert_eq!(listed.iter().collect::<Vec<_>>(), ahead.to_vec());
                match (p.ticket, mine) {
                    (Some(t), Some(_)) => prop_assert_eq!(*ticket, Some(Issued::Existing(t))),
                    (Some(_), None) => {
                        // Re-made at the back of the queue, as the waiting
                        // process.
                        prop_assert_eq!(*ticket, Some(Issued::New));
                        prop_assert_eq!(after.waiters.last().map(|w| w.0), after.ticket);
                        prop_assert_eq!(after.enqueued.as_ref(), Some(p.waiter_holder.as_ref().unwrap_or(&p.holder)));
                    }
                    (None, _) => prop_assert_eq!(*ticket, None),
                }
            }
        }
        // The queue keeps its order; only a granted acquirer and the
        // listed waiters leave it.
        let granted = matches!(plan.outcome, Acquire::Acquired(_));
        let kept: Vec<_> = queue
            .iter()
            .filter(|w| !(granted && Some(w.ticket) == p.ticket))
            .map(|w| (w.ticket, w.mode))
            .collect();
        prop_assert_eq!(&after.waiters[..kept.len()], &kept[..]);
        prop_assert!(after.waiters.len() <= kept.len() + 1);
    }

    #[test]
    fn renew_and_release_act_only_on_the_live_token_of_its_owner(
        row in any_row(),
        exists in any::<bool>(),
        asked in proptest::option::of(0..3usize),
        release in any::<bool>(),
        ended in proptest::option::of(prop_oneof![
            Just(HistoryEvent::Expired),
            Just(HistoryEvent::Released),
            Just(HistoryEvent::FastTakeover),
        ]),
        // Which grant the caller names: none (a token alone), its own, or
        // another grant with the same token (a store that lost data).
        named in 0..3u8,
        bound in any::<bool>(),
    ) {
        let mut g = grant(5, &row);
        g.holder.bound = bound;
        let seen = (g.clone(), row.live);
        let found = exists.then_some(&seen);
        let owner = asked.map(|i| OWNERS[i].to_owned());
        let grant_id = match named {
            0 => None,
            1 => Some(g.id()),
            _ => Some(GrantId(g.id().0.wrapping_add(1))),
        };
        let (outcome, plan_ops) = if release {
            let p = LeaseReleaseParams { name: g.name.clone(), token: g.token, owner, grant: grant_id };
            let plan = plan::release(&p, found, ended);
            (plan.outcome, plan.ops)
        } else {
            let p = LeaseRenewParams { name: g.name.clone(), token: g.token, owner, grant: grant_id, ttl: Duration::from_secs(9) };
            let plan = plan::renew(&p, found, ended);
            (plan.outcome, plan.ops)
        };
        let verdict = rules::owner_verdict(asked.map(|i| OWNERS[i]), &g.owner, g.owner_explicit);
        let expected = match (exists, verdict) {
            // Without its grant, the history's word on how it ended
            // decides; a grant the store still has decides for itself.
            (false, _) if ended == Some(HistoryEvent::Expired) => Err(LostReason::Expired),
            (false, _) => Err(LostReason::Gone),
            // Another grant's token: not the caller's, whoever owns it.
            (true, _) if named == 2 => Err(LostReason::OtherGrant),
            (true, Err(reason)) => Err(reason),
            (true, Ok(())) if !row.live => Err(LostReason::Expired),
            // A token alone never acts on a grant bound to a process.
            (true, Ok(())) if named == 0 && bound => Err(LostReason::BoundToProcess),
            (true, Ok(())) => Ok(()),
        };
        prop_assert_eq!(outcome, expected);
        let rows = if exists { vec![(g.clone(), row.live)] } else { Vec::new() };
        let after = applied(&Plan { ops: plan_ops.clone(), outcome: () }, &Model::new(&rows, &[]))?;
        match expected {
            Ok(()) if release => {
                prop_assert!(after.grants.is_empty());
                prop_assert_eq!(after.history, vec![(HistoryEvent::Released, g.token)]);
            }
            Ok(()) => {
                prop_assert_eq!(plan_ops, vec![Op::ExtendGrant { token: g.token, ttl: Duration::from_secs(9), holder: None }]);
            }
            Err(reason) => {
                // A refusal touches no live grant, removes an expired one
                // only when the owner may, and is recorded last.
                prop_assert_eq!(after.grants.len(), usize::from(exists && reason != LostReason::Expired));
                prop_assert_eq!(after.history.last(), Some(&(HistoryEvent::StaleRefused, g.token)));
                prop_assert_eq!(
                    after.history.contains(&(HistoryEvent::Expired, g.token)),
                    exists && reason == LostReason::Expired,
                    "an expiry is recorded once, when the grant is removed"
                );
            }
        }
    }

    #[test]
    fn fence_passes_only_the_live_newest_token(
        row in any_row(),
        exists in any::<bool>(),
        newest in proptest::option::of(4..7u64),
    ) {
        let g = grant(5, &row);
        let seen = (g.clone(), row.live);
        let found = exists.then_some(&seen);
        let p = LeaseFenceParams { name: g.name.clone(), token: g.token, grant: None, caller: "sink".into() };
        let newest = newest.map(Token);
        let plan = plan::fence(&p, newest, found);
        let rows = if exists { vec![(g.clone(), row.live)] } else { Vec::new() };
        let after = applied(&plan, &Model::new(&rows, &[]))?;
        let passes = exists && row.live && (!row.mode.is_exclusive() || newest == Some(g.token));
        match &plan.outcome {
            LeaseFence::Passed(passed) => {
                prop_assert!(passes);
                prop_assert_eq!(passed, &g);
                prop_assert_eq!(&after.history, &vec![(HistoryEvent::FencePassed, g.token)]);
            }
            LeaseFence::Refused { reason, .. } => {
                prop_assert!(!passes);
                let superseded = newest.is_some_and(|n| n > g.token) || exists && row.live;
                prop_assert_eq!(*reason == FenceRefusal::Superseded, superseded);
                prop_assert_eq!(after.grants.len(), usize::from(exists && row.live));
                prop_assert_eq!(after.history.last(), Some(&(HistoryEvent::FenceRefused, g.token)));
            }
        }
    }
}

/// One step of a run of acquirers against one name.
#[derive(Debug, Clone)]
enum Step {
    /// A newcomer asks once (and queues, if `waits`).
    Acquire { mode: Mode, waits: bool },
    /// The oldest waiter asks again with its ticket.
    Retry,
    /// The live grant at this index (modulo their number) is released.
    Release(usize),
}

fn any_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (any_mode(), any::<bool>()).prop_map(|(mode, waits)| Step::Acquire { mode, waits }),
        1 => Just(Step::Retry),
        2 => (0..8usize).prop_map(Step::Release),
    ]
}

/// Whether no live grant has more grants beside it than it asked for —
/// counted here from the modes alone, sharing nothing with `rules`.
fn every_limit_kept(live: &[Mode]) -> Result<(), String> {
    for mode in live {
        match mode {
            Mode::Exclusive if live.len() > 1 => return Err(format!("exclusive among {live:?}")),
            Mode::Shared { limit: Some(n) } if live.len() > *n as usize => {
                return Err(format!(
                    "{} live grants, one of which asked for at most {n}: {live:?}",
                    live.len()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever the order of acquirers, waiters and releases, and whatever
    /// limits they ask for, no grant ever has more live grants beside it
    /// (itself included) than its own limit.
    #[test]
    fn no_admitted_set_exceeds_any_members_limit(steps in proptest::collection::vec(any_step(), 1..40)) {
        let mut model = Model::new(&[], &[]);
        for step in steps {
            let rows: Vec<(Grant, bool)> = model
                .grants
                .iter()
                .map(|(token, mode, live, _)| {
                    let row = Row { mode: *mode, owner: 0, explicit: false, holder: 0, live: *live };
                    (grant(token.0, &row), *live)
                })
                .collect();
            let mut p = any_request_fixed();
            match step {
                Step::Acquire { mode, waits } => {
                    p.mode = mode;
                    // An unknown ticket: registered at the back if held.
                    p.ticket = waits.then_some(WaiterTicket(1));
                }
                Step::Retry => {
                    let Some(&(ticket, mode)) = model.waiters.first() else { continue };
                    p.mode = mode;
                    p.ticket = Some(ticket);
                }
                Step::Release(i) => {
                    if !model.grants.is_empty() {
                        let i = i % model.grants.len();
                        model.grants.remove(i);
                    }
                    continue;
                }
            }
            let queue: Vec<QueuedWaiter> = model
                .waiters
                .iter()
                .map(|&(ticket, mode)| QueuedWaiter { ticket, mode, holder: None })
                .collect();
            let plan = plan::acquire(&p, &rows, &queue);
            let last_token = model.last_token;
            model = applied(&plan, &model)?;
            // Applied once per transaction: start the next one afresh.
            model.issued = None;
            model.ticket = None;
            model.touched.clear();
            prop_assert!(model.last_token >= last_token);
            if let Err(broken) = every_limit_kept(&model.live()) {
                return Err(TestCaseError::fail(format!("{broken}; after {:?}", plan.outcome)));
            }
        }
    }
}

/// The order a store applies: expiry, takeover, a dead waiter ahead
/// leaving (the acquirer's own ticket in the list is ignored), then the
/// grant, each with its entry, and the granted waiter leaving the queue.
#[test]
fn one_plan_in_order() {
    let live = grant(
        1,
        &Row {
            mode: Mode::Exclusive,
            owner: 1,
            explicit: false,
            holder: 2,
            live: true,
        },
    );
    let expired = grant(
        2,
        &Row {
            mode: Mode::Shared { limit: None },
            owner: 0,
            explicit: true,
            holder: 0,
            live: false,
        },
    );
    let mut p = any_request_fixed();
    p.evict = vec![Token(1), Token(2), Token(7)];
    p.evict_waiters = vec![WaiterTicket(100), WaiterTicket(101), WaiterTicket(99)];
    p.ticket = Some(WaiterTicket(101));
    let queued = |ticket| QueuedWaiter {
        ticket: WaiterTicket(ticket),
        mode: Mode::Exclusive,
        holder: Some(holder(0)),
    };
    let plan = plan::acquire(
        &p,
        &[(live, true), (expired, false)],
        &[queued(100), queued(101), queued(102)],
    );
    assert_eq!(plan.outcome, Acquire::Acquired(Issued::New));
    let kinds: Vec<String> = plan
        .ops
        .iter()
        .map(|op| match op {
            Op::RemoveGrant { token, live } => format!("remove {token} live={live}"),
            Op::InsertGrant(_) => "insert".into(),
            Op::RemoveWaiter(t) => format!("leave {}", t.0),
            Op::Record(e) => format!("{} {:?}: {}", e.event.as_str(), e.token, e.detail),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "remove 2 live=false",
            "expired Existing(Token(2)): TTL of 5.0s ran out (holder h:40)",
            "remove 1 live=true",
            "fast_takeover Existing(Token(1)): holder other:40 proved gone by h:40 before its TTL ran out",
            "leave 100",
            "insert",
            "leave 101",
            "granted New: exclusive for 9.0s to h:40",
        ]
    );
}

fn any_request_fixed() -> LeaseAcquireParams {
    LeaseAcquireParams {
        name: LeaseName::new("n").unwrap(),
        owner: Owner {
            label: "h:40".into(),
            explicit: false,
        },
        mode: Mode::Exclusive,
        ttl: Duration::from_secs(9),
        holder: holder(0),
        ticket: None,
        waiter_ttl: Duration::from_secs(3),
        evict: Vec::new(),
        evict_waiters: Vec::new(),
        waiter_holder: None,
        reacquire_by_process: false,
    }
}
