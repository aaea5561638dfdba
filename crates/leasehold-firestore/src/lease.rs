//! Lease operations on Firestore: each reads one name's document (and the
//! store's document when the name is new), plans with
//! `leasehold_backend::plan` (the algorithm every store applies), applies
//! the plan to the document in memory and commits it in ONE atomic commit
//! whose precondition is that the document is still as it was read (its
//! update time; "does not exist" for a new one). A commit whose
//! precondition failed wrote nothing: someone else changed the name in
//! between, so read and decide again — optimistic concurrency, as the etcd
//! store does with compares.
//!
//! **The clock is the server's.** Every decision is taken at the
//! `readTime` Firestore returned with the read it is based on: a grant is
//! live while its `expires_us` (the read time of the decision that made or
//! extended it, plus its TTL) is after the read time of the decision that
//! looks at it. The commit lands after that read, so a grant never lasts
//! longer on the server than its TTL after its commit, and a client's
//! clock never enters a decision.

pub use leasehold_backend::document::Turn;
use leasehold_backend::document::{self, DocStore, Draft, HistoryRec, Snapshot};
use leasehold_backend::{
    HistoryEntry, LeaseAcquire, LeaseAcquireParams, LeaseFence, LeaseFenceParams, LeaseHistoryParams, LeaseListParams,
    LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew, LeaseRenewParams, LeaseState, TokensBumpParams,
    TokensBumpRefused, TokensBumped, WaiterEnqueueParams, WaiterTicket, signed,
};

use crate::layout::{CHUNK, CHUNKS_KEPT, Layout, State};
use crate::rest::{self, Doc, Field, Precondition, Rest, ServerTime, Write};

#[derive(Debug)]
pub enum Error {
    Rest(rest::Error),
    /// A document this code could not have written.
    Corrupt(String),
    /// Lost the race `document::MAX_ROUNDS` times in a row.
    Contended(String),
}

impl From<rest::Error> for Error {
    fn from(e: rest::Error) -> Self {
        Error::Rest(e)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// A new name's document is made with the store's document as read (a
/// new name starts above its floor, and its creation writes it).
pub struct Creation {
    store: Option<Doc>,
}

/// What a snapshot of a name carries for its commit: the document as read
/// (its update time is the commit's precondition), or, when it is missing,
/// its creation.
pub struct Read {
    doc: Option<Doc>,
    creation: Option<Creation>,
}

fn decode_history(doc: &Doc, json: &str) -> Result<Vec<HistoryRec>> {
    serde_json::from_str(json).map_err(|e| Error::Corrupt(format!("{} holds unreadable history: {e}", doc.name)))
}

fn entry(r: &HistoryRec) -> Result<HistoryEntry> {
    r.entry().map_err(|e| Error::Corrupt(e.to_string()))
}

/// What the store's document holds: the floor new names start above, and
/// how many names were ever made (both 0 while it does not exist).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreDoc {
    pub floor: u64,
    pub names: u64,
}

impl StoreDoc {
    pub fn of(doc: Option<&Doc>) -> Self {
        let field = |f: &str| u64::try_from(doc.and_then(|d| d.int(f)).unwrap_or(0)).unwrap_or(0);
        Self {
            floor: field("floor"),
            names: field("names"),
        }
    }

    /// The write that makes the store's document this, if it is still as
    /// `read` (a bump and a name's creation both write it so).
    fn write(self, conn: &Conn<'_>, read: Option<&Doc>) -> Write {
        Write::Set {
            name: conn.rest.doc_name(&conn.layout.store()),
            fields: vec![
                ("floor", Field::Int(signed(self.floor))),
                ("names", Field::Int(signed(self.names))),
            ],
            precondition: Precondition::of(read),
        }
    }
}

/// The client and the layout, for one call.
pub struct Conn<'a> {
    pub rest: &'a Rest,
    pub layout: &'a Layout,
}

/// A name's snapshot on Firestore.
type Snap = Snapshot<Read>;

impl DocStore for Conn<'_> {
    type Read = Read;
    type Error = Error;

    /// Read one name's document, and the store's when the name has none.
    fn snapshot(&self, name: &LeaseName) -> Result<Snap> {
        if let Some(snap) = self.snapshot_existing(name)? {
            return Ok(snap);
        }
        let doc_name = self.rest.doc_name(&self.layout.name(name));
        let store_name = self.rest.doc_name(&self.layout.store());
        let (mut docs, now) = self.rest.batch_get(&[doc_name, store_name], None)?;
        let store = docs.pop().flatten();
        if let Some(doc) = docs.pop().flatten() {
            return Self::decode(doc, now);
        }
        let state = State {
            floor: StoreDoc::of(store.as_ref()).floor,
            ..State::default()
        };
        let read = Read {
            doc: None,
            creation: Some(Creation { store }),
        };
        Ok(Snapshot::new(state, 0, now.0, read))
    }

    /// Commit `draft` over `snap`: `Ok(false)` when a precondition failed
    /// (nothing was written; decide again).
    fn commit(&self, name: &LeaseName, snap: &Snap, mut draft: Draft) -> Result<bool> {
        let mut writes = Vec::new();
        // Whole chunks of history move out of the name's document; the
        // oldest chunk beyond those kept goes.
        while draft.state.recent.len() as u64 >= CHUNK {
            let first = draft.state.seq - draft.state.recent.len() as u64;
            let chunk = first / CHUNK;
            let entries: Vec<HistoryRec> = draft.state.recent.drain(..CHUNK as usize).collect();
            writes.push(Write::Set {
                name: self.rest.doc_name(&self.layout.chunk(name, chunk)),
                fields: vec![("entries", Field::Str(document::to_json(&entries)))],
                precondition: Precondition::None,
            });
            if chunk >= CHUNKS_KEPT {
                writes.push(Write::Delete {
                    name: self.rest.doc_name(&self.layout.chunk(name, chunk - CHUNKS_KEPT)),
                    precondition: Precondition::None,
                });
            }
        }
        writes.push(Write::Set {
            name: self.rest.doc_name(&self.layout.name(name)),
            fields: vec![
                ("name", Field::Str(name.as_str().to_owned())),
                ("newest", Field::Int(signed(draft.newest))),
                ("state", Field::Str(document::to_json(&draft.state))),
            ],
            precondition: Precondition::of(snap.read.doc.as_ref()),
        });
        if let Some(Creation { store }) = &snap.read.creation {
            // A new name: counted in the store's document, which a bump
            // reads and writes under the same kind of precondition.
            let mut counted = StoreDoc::of(store.as_ref());
            counted.names += 1;
            writes.push(counted.write(self, store.as_ref()));
        }
        match self.rest.commit(&writes) {
            Ok(_) => Ok(true),
            Err(rest::Error::Conflict) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The newest `limit` history entries of `name`, newest first: the
    /// document's own, then its chunks read at the same time.
    fn entries(&self, name: &LeaseName, snap: &Snap, limit: u32) -> Result<Vec<HistoryEntry>> {
        let limit = limit as usize;
        let mut out = Vec::new();
        for r in snap.state.recent.iter().rev().take(limit) {
            out.push(entry(r)?);
        }
        // Chunks are numbered from 0 and the newest `CHUNKS_KEPT` are kept:
        // those needed are named, not searched for.
        let flushed = (snap.state.seq - snap.state.recent.len() as u64) / CHUNK;
        let need = ((limit - out.len()) as u64)
            .div_ceil(CHUNK)
            .min(flushed)
            .min(CHUNKS_KEPT);
        if out.len() < limit && need > 0 {
            let names: Vec<String> = (flushed - need..flushed)
                .rev()
                .map(|c| self.rest.doc_name(&self.layout.chunk(name, c)))
                .collect();
            let (chunks, _) = self.rest.batch_get(&names, Some(ServerTime(snap.now_us)))?;
            'chunks: for doc in chunks.iter().flatten() {
                let json = doc
                    .str("entries")
                    .ok_or_else(|| Error::Corrupt(format!("{} has no `entries`", doc.name)))?;
                for r in decode_history(doc, json)?.iter().rev() {
                    if out.len() == limit {
                        break 'chunks;
                    }
                    out.push(entry(r)?);
                }
            }
        }
        Ok(out)
    }

    fn corrupt(what: String) -> Error {
        Error::Corrupt(what)
    }

    fn contended(what: String) -> Error {
        Error::Contended(what)
    }
}

impl Conn<'_> {
    fn decode(doc: Doc, now: ServerTime) -> Result<Snap> {
        let doc_name = doc.name.clone();
        let corrupt = |what: &str| Error::Corrupt(format!("{doc_name}: {what}"));
        let newest = doc.int("newest").ok_or_else(|| corrupt("no integer field `newest`"))?;
        let newest = u64::try_from(newest).map_err(|_| corrupt("a negative `newest`"))?;
        let state = doc.str("state").ok_or_else(|| corrupt("no string field `state`"))?;
        let state: State =
            serde_json::from_str(state).map_err(|e| corrupt(&format!("field `state` is unreadable: {e}")))?;
        let read = Read {
            doc: Some(doc),
            creation: None,
        };
        Ok(Snapshot::new(state, newest, now.0, read))
    }

    pub fn acquire(&self, p: &LeaseAcquireParams) -> Result<LeaseAcquire> {
        document::acquire(self, p)
    }

    pub fn renew(&self, p: &LeaseRenewParams) -> Result<LeaseRenew> {
        document::renew(self, p)
    }

    pub fn release(&self, p: &LeaseReleaseParams) -> Result<LeaseRelease> {
        document::release(self, p)
    }

    pub fn fence(&self, p: &LeaseFenceParams) -> Result<LeaseFence> {
        document::fence(self, p)
    }

    pub fn waiter_enqueue(&self, p: &WaiterEnqueueParams) -> Result<WaiterTicket> {
        document::waiter_enqueue(self, p)
    }

    pub fn waiter_remove(&self, name: &LeaseName, ticket: WaiterTicket) -> Result<()> {
        document::waiter_remove(self, name, ticket)
    }

    pub fn get(&self, name: &LeaseName) -> Result<Option<LeaseState>> {
        let snap = self.snapshot(name)?;
        Ok(snap.lease_state(name))
    }

    pub fn list(&self, p: &LeaseListParams) -> Result<Vec<LeaseState>> {
        let mut out = Vec::new();
        for (name, snap) in self.every_name()? {
            if let Some(state) = snap.lease_state(&name)
                && (!p.live_only || !state.grants.is_empty())
            {
                out.push(state);
            }
        }
        out.sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
        Ok(out)
    }

    pub fn history(&self, p: &LeaseHistoryParams) -> Result<Vec<HistoryEntry>> {
        let snap = self.snapshot_existing(&p.name)?;
        match snap {
            Some(snap) => self.entries(&p.name, &snap, p.limit),
            None => Ok(Vec::new()),
        }
    }

    /// Every name with its document, as one query read them.
    fn every_name(&self) -> Result<Vec<(LeaseName, Snap)>> {
        let (docs, now) = self.rest.list(&self.layout.leases_parent(), "leases")?;
        docs.into_iter()
            .map(|doc| {
                let stored = doc
                    .str("name")
                    .ok_or_else(|| Error::Corrupt(format!("{} has no `name`", doc.name)))?;
                let name = LeaseName::stored(stored)
                    .map_err(|e| Error::Corrupt(format!("{} names {stored:?}: {e}", doc.name)))?;
                Ok((name, Self::decode(doc, now)?))
            })
            .collect()
    }

    /// A name's document, if it has one (a read that never creates).
    fn snapshot_existing(&self, name: &LeaseName) -> Result<Option<Snap>> {
        let doc_name = self.rest.doc_name(&self.layout.name(name));
        let (mut docs, now) = self.rest.batch_get(std::slice::from_ref(&doc_name), None)?;
        docs.pop().flatten().map(|doc| Self::decode(doc, now)).transpose()
    }

    /// Raise the floor: first the store's, which every name made from
    /// then on starts above (a creation commits under the precondition
    /// that the store's document is as it read it), then every existing
    /// name's own, each under its precondition. Tokens issued while a bump
    /// runs are not bounded by it; every token issued after it returns is
    /// above its floor, and per name tokens only grow in any case.
    pub fn tokens_bump(&self, p: &TokensBumpParams) -> Result<std::result::Result<TokensBumped, TokensBumpRefused>> {
        let highest = self
            .every_name()?
            .iter()
            .map(|(_, snap)| snap.newest)
            .max()
            .unwrap_or(0);
        let store_name = self.rest.doc_name(&self.layout.store());
        let raised = rounds(
            || "raising the token floor".to_owned(),
            Turn::Prompt,
            || {
                let (mut docs, _) = self.rest.batch_get(std::slice::from_ref(&store_name), None)?;
                let store = docs.pop().flatten();
                let mut raised = StoreDoc::of(store.as_ref());
                let highest = leasehold_backend::Token(highest.max(raised.floor));
                let new_floor = match p.floor_above(highest) {
                    Ok(f) => f,
                    Err(refused) => return Ok(Some(Err(refused))),
                };
                raised.floor = new_floor.0;
                match self.rest.commit(&[raised.write(self, store.as_ref())]) {
                    Ok(_) => Ok(Some(Ok(TokensBumped {
                        highest,
                        floor: new_floor,
                    }))),
                    Err(rest::Error::Conflict) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            },
        )?;
        let Ok(bumped) = raised else {
            return Ok(raised);
        };
        // Every name made before the store's floor was raised is listed
        // now; those made since start above it.
        for (name, listed) in self.every_name()? {
            document::raise_floor(self, &name, Some(listed), bumped.floor.0)?;
        }
        Ok(Ok(bumped))
    }

    /// The update time of a name's document (`None` while it has none):
    /// what a waiter polls.
    pub fn version(&self, name: &LeaseName) -> Result<Option<String>> {
        let doc_name = self.rest.doc_name(&self.layout.name(name));
        let (mut docs, _) = self.rest.batch_get(std::slice::from_ref(&doc_name), None)?;
        Ok(docs.pop().flatten().map(|d| d.update_time))
    }
}

/// Run `round` until it commits, as every call of this store does
/// ([`document::rounds`]).
pub fn rounds<T>(what: impl FnOnce() -> String, turn: Turn, round: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    document::rounds::<Conn<'_>, T>(what, turn, round)
}
