//! The embedded SQLite store.
