//! One operation's statements on a pooled connection ([`Db`]): prepared
//! once per connection, run inside a transaction or on the session itself,
//! and the operation's own failures ([`Error`]).

use std::time::SystemTime;

use leasehold_backend::Watched;
use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

use crate::clock::NOW;
use crate::notify;
use crate::pool::Statements;

/// A failure inside an operation, before it is mapped for the user.
#[derive(Debug)]
pub(crate) enum Error {
    Pg(postgres::Error),
    /// A row this code could not have written.
    BadRow(String),
    /// A name's token counter missing or below a token its history records
    /// granted (`lease::counter`): issuing from it would reissue tokens.
    Counter(String),
}

impl From<postgres::Error> for Error {
    fn from(e: postgres::Error) -> Self {
        Error::Pg(e)
    }
}

pub(crate) type Result<T> = std::result::Result<T, Error>;

/// Where an operation's statements run: inside a transaction, or — for an
/// operation that is one write statement — on the session itself, where
/// the statement commits on its own: one round trip instead of three
/// (`BEGIN`, the statement, `COMMIT`).
pub(crate) enum Conn<'a> {
    Tx(postgres::Transaction<'a>),
    Auto(&'a mut Client),
}

/// One operation on a pooled connection, with its statement cache.
pub(crate) struct Db<'a> {
    pub(crate) conn: Conn<'a>,
    pub(crate) cache: &'a mut Statements,
    pub(crate) schema: &'a str,
    pub(crate) channel: &'a str,
    /// On the session itself: whether a statement was sent, after which a
    /// lost connection leaves the outcome unknown.
    pub(crate) sent: bool,
}

impl Db<'_> {
    fn statement(&mut self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.cache.get(sql) {
            return Ok(s.clone());
        }
        let s = match &mut self.conn {
            Conn::Tx(tx) => tx.prepare(sql)?,
            Conn::Auto(client) => client.prepare(sql)?,
        };
        self.cache.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    /// Run `sql` (prepared once per connection) with `f`, on the
    /// transaction or the session.
    fn run<T>(
        &mut self,
        sql: &str,
        f: impl FnOnce(&mut dyn GenericClientDyn, &Statement) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let s = self.statement(sql)?;
        let client: &mut dyn GenericClientDyn = match &mut self.conn {
            Conn::Tx(tx) => tx,
            Conn::Auto(client) => {
                self.sent = true;
                *client
            }
        };
        Ok(f(client, &s)?)
    }

    pub(crate) fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        self.run(sql, |c, s| c.query(s, params))
    }

    pub(crate) fn query_one(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        self.run(sql, |c, s| c.query_one(s, params))
    }

    pub(crate) fn query_opt(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<Row>> {
        self.run(sql, |c, s| c.query_opt(s, params))
    }

    pub(crate) fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        self.run(sql, |c, s| c.execute(s, params))
    }

    /// The channel this store's notifications go to.
    pub(crate) fn channel(&self) -> &str {
        self.channel
    }

    /// Wake the waiters on `what` once this transaction commits (nothing
    /// is sent if it rolls back; repeats within one transaction fold).
    pub(crate) fn notify(&mut self, what: &Watched) -> Result<()> {
        let payload = notify::payload(what);
        let channel = self.channel.to_owned();
        self.execute("SELECT pg_notify($1, $2)", &[&channel, &payload])?;
        Ok(())
    }

    /// The store's now (the server's clock).
    pub(crate) fn now(&mut self) -> Result<SystemTime> {
        Ok(self.query_one(&format!("SELECT {NOW}"), &[])?.get(0))
    }
}

/// The calls `Db` makes, on a transaction or a client alike
/// (`postgres::GenericClient` has generic methods, so it is not
/// dyn-compatible).
trait GenericClientDyn {
    fn query(&mut self, s: &Statement, p: &[&(dyn ToSql + Sync)]) -> std::result::Result<Vec<Row>, postgres::Error>;
    fn query_one(&mut self, s: &Statement, p: &[&(dyn ToSql + Sync)]) -> std::result::Result<Row, postgres::Error>;
    fn query_opt(
        &mut self,
        s: &Statement,
        p: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Option<Row>, postgres::Error>;
    fn execute(&mut self, s: &Statement, p: &[&(dyn ToSql + Sync)]) -> std::result::Result<u64, postgres::Error>;
}

impl<C: postgres::GenericClient> GenericClientDyn for C {
    fn query(&mut self, s: &Statement, p: &[&(dyn ToSql + Sync)]) -> std::result::Result<Vec<Row>, postgres::Error> {
        postgres::GenericClient::query(self, s, p)
    }
    fn query_one(&mut self, s: &Statement, p: &[&(dyn ToSql + Sync)]) -> std::result::Result<Row, postgres::Error> {
        postgres::GenericClient::query_one(self, s, p)
    }
    fn query_opt(
        &mut self,
        s: &Statement,
        p: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Option<Row>, postgres::Error> {
        postgres::GenericClient::query_opt(self, s, p)
    }
    fn execute(&mut self, s: &Statement, p: &[&(dyn ToSql + Sync)]) -> std::result::Result<u64, postgres::Error> {
        postgres::GenericClient::execute(self, s, p)
    }
}
