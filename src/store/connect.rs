//! Opening the database (SQLite pragmas, pool sizes) and applying migrations.

use std::time::Duration;

use anyhow::Context as _;
use migration::{Migrator, MigratorTrait};
use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{ConnectOptions, Database, DatabaseConnection};

use super::settings::StoreSettings;

/// Which engine a URL points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn of_url(url: &str) -> anyhow::Result<Self> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            anyhow::bail!("store.url must start with sqlite: or postgres:// (got {:?})", redact(url))
        }
    }
}

/// How long a pooled connection may sit idle before it is pinged when next taken.
const PING_WHEN_IDLE: Duration = Duration::from_secs(1);

/// How much of a SQLite database file each connection maps (the file may be larger).
const MMAP_BYTES: u64 = 1 << 30;

/// Opens a pool. SQLite runs in WAL mode with full sync so a committed transition survives
/// a crash, and waits on a busy lock instead of failing.
pub async fn connect(settings: &StoreSettings) -> anyhow::Result<DatabaseConnection> {
    open(settings, SqliteSynchronous::Full).await
}

/// One connection for deleting history on SQLite, whose commits are not synced: WAL mode
/// stays consistent, and what a power cut can take back is only the last batches of an
/// idempotent prune, which the next pass deletes again. The checkpoint the cleaner runs
/// after each batch, outside the writer's turn, syncs the log; so the turn a prune batch
/// holds is its statements, not a disk flush. (A later synced commit of another connection
/// syncs the log up to itself, these frames included, so nothing after them survives
/// without them.)
pub async fn connect_for_pruning(settings: &StoreSettings) -> anyhow::Result<DatabaseConnection> {
    open(&StoreSettings { max_connections: 1, ..settings.clone() }, SqliteSynchronous::Normal).await
}

async fn open(settings: &StoreSettings, synchronous: SqliteSynchronous) -> anyhow::Result<DatabaseConnection> {
    Backend::of_url(&settings.url)?;
    let mut options = ConnectOptions::new(settings.url.clone());
    options
        .max_connections(settings.max_connections)
        .min_connections(1)
        .connect_timeout(Duration::from_secs(settings.connect_timeout_seconds))
        // A connection in use is not pinged before each use (a round trip, which a worker
        // far from its database pays per statement); one idle this long is.
        .test_before_acquire_if_idle_for(PING_WHEN_IDLE)
        .sqlx_logging(false)
        .map_sqlx_sqlite_opts(move |opts| {
            opts.create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(synchronous)
                .busy_timeout(Duration::from_secs(30))
                .foreign_keys(true)
                // Pages read through a shared mapping, not copied in by a read(2) each time
                // another connection's commit invalidates this one's cache.
                .pragma("mmap_size", MMAP_BYTES.to_string())
        });
    Database::connect(options).await.with_context(|| format!("cannot open the store at {}", redact(&settings.url)))
}

/// Applies every pending migration.
pub async fn migrate(db: &DatabaseConnection) -> anyhow::Result<()> {
    Migrator::up(db, None).await.context("applying migrations")
}

/// A URL with its password replaced, fit for logs and error messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}://{user}:***{}", &url[..scheme_end], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_print() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("sqlite://x.db"), "sqlite://x.db");
    }

    #[test]
    fn backend_is_read_from_the_scheme() {
        assert_eq!(Backend::of_url("sqlite://a.db?mode=rwc").ok(), Some(Backend::Sqlite));
        assert_eq!(Backend::of_url("postgres://h/db").ok(), Some(Backend::Postgres));
        assert!(Backend::of_url("mysql://h/db").is_err());
    }
}
