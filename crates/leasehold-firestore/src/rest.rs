//! Firestore's REST API, the calls the store makes: a batched read
//! (`batchGet`), an atomic commit whose writes carry preconditions
//! (`commit`), and ordered queries (`runQuery`). Every answer carries the
//! server's time — a read's `readTime`, a commit's `commitTime` — and that
//! is the store's clock (see docs/FIRESTORE.md).
//!
//! Documents are read and written with the few field types leasehold
//! uses: strings and integers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;

use serde_json::{Value, json};

use crate::http::{Client, Response};

/// A time on the server's clock, in microseconds since the Unix epoch
/// (Firestore's timestamps have microsecond precision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerTime(pub i64);

impl ServerTime {
    /// Parse an RFC 3339 timestamp as Firestore writes them.
    pub fn parse(text: &str) -> Option<Self> {
        let t: jiff::Timestamp = text.parse().ok()?;
        Some(ServerTime(t.as_microsecond()))
    }

    /// As a `SystemTime`.
    pub fn system_time(self) -> std::time::SystemTime {
        let since = std::time::Duration::from_micros(self.0.unsigned_abs());
        if self.0 >= 0 {
            std::time::UNIX_EPOCH + since
        } else {
            std::time::UNIX_EPOCH - since
        }
    }
}

/// A document as read: its fields (strings and integers) and its update
/// time, which a write's precondition names to be sure nothing changed
/// it since.
#[derive(Debug, Clone)]
pub struct Doc {
    pub name: String,
    pub fields: BTreeMap<String, Field>,
    /// As Firestore wrote it (used verbatim in preconditions).
    pub update_time: String,
}

/// A field's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    Str(String),
    Int(i64),
}

impl Doc {
    pub fn str(&self, field: &str) -> Option<&str> {
        match self.fields.get(field) {
            Some(Field::Str(s)) => Some(s),
            _ => None,
        }
    }

    pub fn int(&self, field: &str) -> Option<i64> {
        match self.fields.get(field) {
            Some(Field::Int(n)) => Some(*n),
            _ => None,
        }
    }
}

/// What must hold of a document for a write to it to be applied.
#[derive(Debug, Clone)]
pub enum Precondition {
    /// None: the write applies whatever is there.
    None,
    /// The document does not exist.
    Missing,
    /// The document is still as it was read.
    Unchanged(String),
}

impl Precondition {
    /// As read: unchanged if it was there, still missing if not.
    pub fn of(doc: Option<&Doc>) -> Self {
        doc.map_or(Precondition::Missing, |d| {
            Precondition::Unchanged(d.update_time.clone())
        })
    }
}

/// One write of a commit.
#[derive(Debug, Clone)]
pub enum Write {
    /// Replace the document's fields.
    Set {
        name: String,
        fields: Vec<(&'static str, Field)>,
        precondition: Precondition,
    },
    Delete {
        name: String,
        precondition: Precondition,
    },
}

/// What a commit did: each write's new update time (`None` for a
/// delete).
#[derive(Debug)]
pub struct Committed {
    pub updates: Vec<Option<ServerTime>>,
}

/// Why a call failed.
#[derive(Debug)]
pub enum Error {
    /// The server could not be reached or the connection broke.
    Io(io::Error),
    /// A commit's precondition failed, or Firestore aborted it for
    /// contention: nothing was written; read and decide again.
    Conflict,
    /// No access token: the credentials' own message.
    Auth(String),
    /// The server answered with an error status.
    Status { code: u16, status: String, message: String },
    /// An answer that does not read as Firestore's.
    Unreadable(String),
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::Auth(why) => f.write_str(why),
            Error::Conflict => f.write_str("another client changed the document first"),
            Error::Status { code, status, message } => write!(f, "Firestore answered {code} {status}: {message}"),
            Error::Unreadable(what) => write!(f, "an answer leasehold cannot read: {what}"),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// A path segment of a URL: every byte but the unreserved ones escaped.
pub fn escape_path(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The REST API of one database.
#[derive(Debug)]
pub struct Rest {
    pub client: Client,
    /// `projects/P/databases/D`.
    pub database: String,
    /// How requests are authorised: `None` for the emulator.
    pub auth: Option<Box<dyn Authorizer>>,
}

/// Where a request's access token comes from (Google's credentials; the
/// emulator takes none).
pub trait Authorizer: Send + Sync + std::fmt::Debug {
    /// The headers that authorise a request (a current access token).
    fn headers(&self) -> Result<Vec<(&'static str, String)>>;
    /// What the credentials are, for messages (never a secret).
    fn describe(&self) -> String;
}

fn encode_fields(fields: &[(&'static str, Field)]) -> Value {
    let mut map = serde_json::Map::new();
    for (k, v) in fields {
        let value = match v {
            Field::Str(s) => json!({ "stringValue": s }),
            Field::Int(n) => json!({ "integerValue": n.to_string() }),
        };
        map.insert((*k).to_owned(), value);
    }
    Value::Object(map)
}

fn decode_doc(v: &Value) -> Result<Doc> {
    let bad = || Error::Unreadable(format!("a document {v}"));
    let name = v["name"].as_str().ok_or_else(bad)?.to_owned();
    let update_time = v["updateTime"].as_str().ok_or_else(bad)?.to_owned();
    let mut fields = BTreeMap::new();
    if let Some(map) = v["fields"].as_object() {
        for (k, value) in map {
            let field = if let Some(s) = value["stringValue"].as_str() {
                Field::Str(s.to_owned())
            } else if let Some(n) = value["integerValue"].as_str().and_then(|n| n.parse().ok()) {
                Field::Int(n)
            } else {
                return Err(Error::Unreadable(format!("field {k:?} of {name} holds {value}")));
            };
            fields.insert(k.clone(), field);
        }
    }
    Ok(Doc {
        name,
        fields,
        update_time,
    })
}

fn read_time(v: &Value) -> Result<ServerTime> {
    v["readTime"]
        .as_str()
        .and_then(ServerTime::parse)
        .ok_or_else(|| Error::Unreadable(format!("no readTime in {v}")))
}

impl Rest {
    /// `projects/P/databases/D/documents/PATH`.
    pub fn doc_name(&self, path: &str) -> String {
        format!("{}/documents/{path}", self.database)
    }

    fn post(&self, what: &str, path_after_database: &str, body: &Value) -> Result<Value> {
        let url = format!("/v1/{}{path_after_database}", self.database);
        let body = serde_json::to_vec(body).expect("JSON values always serialize");
        let mut headers = vec![("Content-Type", "application/json".to_owned())];
        if let Some(auth) = &self.auth {
            headers.extend(auth.headers()?);
        }
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let Response { status, body } = self.client.send("POST", &url, &headers, &body)?;
        let value: Value = serde_json::from_slice(&body).map_err(|_| {
            Error::Unreadable(format!(
                "{what} answered {status} with {:?}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ))
        })?;
        if status == 200 {
            return Ok(value);
        }
        // One error object, or (for streamed answers) a list holding one.
        let error = value.get("error").or_else(|| value.get(0).and_then(|v| v.get("error")));
        let error = error.cloned().unwrap_or(Value::Null);
        let status_name = error["status"].as_str().unwrap_or("").to_owned();
        if matches!(
            status_name.as_str(),
            "FAILED_PRECONDITION" | "ALREADY_EXISTS" | "ABORTED"
        ) && what == "commit"
        {
            return Err(Error::Conflict);
        }
        Err(Error::Status {
            code: status,
            status: status_name,
            message: error["message"].as_str().unwrap_or("").to_owned(),
        })
    }

    /// Read `names` (full document names) at one time — `at` when given
    /// (a consistent second read) — : the documents, in the order asked
    /// (`None` for a missing one), and the read's time.
    pub fn batch_get(&self, names: &[String], at: Option<ServerTime>) -> Result<(Vec<Option<Doc>>, ServerTime)> {
        let mut body = json!({ "documents": names });
        if let Some(t) = at {
            body["readTime"] = json!(format_time(t));
        }
        let answer = self.post("batchGet", "/documents:batchGet", &body)?;
        let items = answer
            .as_array()
            .ok_or_else(|| Error::Unreadable(format!("batchGet answered {answer}")))?;
        let mut found: BTreeMap<String, Doc> = BTreeMap::new();
        let mut at = None;
        for item in items {
            if let Some(doc) = item.get("found") {
                let doc = decode_doc(doc)?;
                found.insert(doc.name.clone(), doc);
            }
            if item.get("readTime").is_some() {
                let t = read_time(item)?;
                // One read time for the whole batch (Firestore reads it
                // at one time); the newest, should they differ.
                at = Some(at.map_or(t, |a: ServerTime| a.max(t)));
            }
        }
        let at = at.ok_or_else(|| Error::Unreadable("batchGet answered without a readTime".into()))?;
        Ok((names.iter().map(|n| found.remove(n)).collect(), at))
    }

    /// Apply `writes` all or none. `Err(Conflict)` when a precondition
    /// failed (nothing was written).
    pub fn commit(&self, writes: &[Write]) -> Result<Committed> {
        let writes: Vec<Value> = writes
            .iter()
            .map(|w| match w {
                Write::Set {
                    name,
                    fields,
                    precondition,
                } => {
                    let v = json!({ "update": { "name": name, "fields": encode_fields(fields) } });
                    with_precondition(v, precondition)
                }
                Write::Delete { name, precondition } => with_precondition(json!({ "delete": name }), precondition),
            })
            .collect();
        let answer = self.post("commit", "/documents:commit", &json!({ "writes": writes }))?;
        let results = answer["writeResults"]
            .as_array()
            .ok_or_else(|| Error::Unreadable(format!("commit answered {answer}")))?;
        let updates = update_times(writes.len(), results);
        Ok(Committed { updates })
    }

    /// Every document of collection `collection` under `parent` (a path
    /// below `documents/`), in document name order, and the read's time.
    pub fn list(&self, parent: &str, collection: &str) -> Result<(Vec<Doc>, ServerTime)> {
        self.query(
            parent,
            &json!({
                "from": [{ "collectionId": collection }],
                "orderBy": [{ "field": { "fieldPath": "__name__" }, "direction": "ASCENDING" }],
            }),
        )
    }

    /// The documents a structured query (Firestore's JSON) finds under
    /// `parent`, and the read's time.
    pub fn query(&self, parent: &str, structured: &Value) -> Result<(Vec<Doc>, ServerTime)> {
        let body = json!({ "structuredQuery": structured });
        let escaped: Vec<String> = parent.split('/').map(escape_path).collect();
        let path = format!("/documents/{}:runQuery", escaped.join("/"));
        let answer = self.post("runQuery", &path, &body)?;
        let items = answer
            .as_array()
            .ok_or_else(|| Error::Unreadable(format!("runQuery answered {answer}")))?;
        let mut docs = Vec::new();
        let mut time = None;
        for item in items {
            if let Some(doc) = item.get("document") {
                docs.push(decode_doc(doc)?);
            }
            if item.get("readTime").is_some() {
                time = Some(read_time(item)?);
            }
        }
        let time = time.ok_or_else(|| Error::Unreadable("runQuery answered without a readTime".into()))?;
        Ok((docs, time))
    }
}

fn with_precondition(mut write: Value, precondition: &Precondition) -> Value {
    match precondition {
        Precondition::None => {}
        Precondition::Missing => write["currentDocument"] = json!({ "exists": false }),
        Precondition::Unchanged(t) => write["currentDocument"] = json!({ "updateTime": t }),
    }
    write
}

/// Each write's update time from a commit's `writeResults` (a delete's
/// result has none that means anything: `None`).
fn update_times(n: usize, results: &[Value]) -> Vec<Option<ServerTime>> {
    (0..n)
        .map(|i| {
            results
                .get(i)
                .and_then(|r| r["updateTime"].as_str())
                .and_then(ServerTime::parse)
        })
        .collect()
}

/// RFC 3339 with microseconds, as Firestore reads times.
pub fn format_time(t: ServerTime) -> String {
    jiff::Timestamp::from_microsecond(t.0).map_or_else(|_| "1970-01-01T00:00:00Z".to_owned(), |ts| ts.to_string())
}
