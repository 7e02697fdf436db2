//! A set's index inside PostgreSQL, through pgvector, where the server offers the `vector`
//! extension and `inference.index.pgvector` is `auto`: each build is a table of its own,
//! `embedding_vectors_<build>` (item, vector), with pgvector's HNSW index on it. Nothing is
//! fetched or mapped: every process searches it with SQL. The table is registered under its
//! set (`embedding_pgvector_build`) before it is made, so publishing a build, like a file
//! build's parts, drops every other table of the set, a crashed build's included.
//!
//! The extension is optional: it is made (`CREATE EXTENSION IF NOT EXISTS vector`) by the
//! first build that finds it offered, and where it is not offered (this machine's Debian
//! PostgreSQL) or cannot be made, the build says why and builds the file index instead.

use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, DbErr, EntityTrait, QueryFilter,
    QuerySelect, Statement, TransactionTrait, Value,
};
use uuid::Uuid;

use crate::inference::entity::{embedding_index, embedding_pgvector_build};
use crate::inference::settings::IndexSettings;
use crate::store::clock;

/// What a pgvector index is called in results and rows.
pub const PGVECTOR: &str = "pgvector";

/// pgvector's limits: dimensions an HNSW index takes (`vector`, `halfvec`), links per node,
/// and the candidate lists.
const MAX_DIMS_VECTOR: usize = 2_000;
const MAX_DIMS_HALFVEC: usize = 4_000;
const MAX_LINKS: usize = 100;
const MAX_EXPANSION: usize = 1_000;
/// About the most text one insert of a build sends.
const STATEMENT_BYTES: usize = 8 << 20;

/// The extension's version, once it is there (made if it was only offered); else why a set
/// gets yardmaster's own file index instead.
pub async fn availability(db: &DatabaseConnection, settings: &IndexSettings) -> Result<String, String> {
    if db.get_database_backend() != DbBackend::Postgres {
        return Err("the store is SQLite".into());
    }
    if settings.pgvector == "off" {
        return Err("inference.index.pgvector is off".into());
    }
    let unavailable = |err: DbErr| format!("the server's extensions could not be read: {err}");
    if let Some(version) = installed(db).await.map_err(unavailable)? {
        return Ok(version);
    }
    let offered = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'",
        ))
        .await
        .map_err(unavailable)?;
    if offered.is_none() {
        return Err(
            "this PostgreSQL server does not offer the vector extension (pgvector is not installed on it)".into()
        );
    }
    let made = db.execute_unprepared("CREATE EXTENSION IF NOT EXISTS vector").await;
    // Two builds may make it at once: the loser's error is no error if it is there now.
    match (made, installed(db).await.map_err(unavailable)?) {
        (_, Some(version)) => Ok(version),
        (Err(err), None) => Err(format!("the server offers the vector extension, but it could not be made: {err}")),
        (Ok(_), None) => Err("the vector extension was made but is not listed".into()),
    }
}

async fn installed(db: &DatabaseConnection) -> Result<Option<String>, DbErr> {
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'",
        ))
        .await?;
    row.map(|row| row.try_get::<String>("", "extversion")).transpose()
}

/// How a build's table holds its vectors: pgvector's type for `precision` (`f32`: `vector`;
/// `f16`, and `i8`, which pgvector has no type for: `halfvec`), its cosine operator class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    kind: &'static str,
    dims: usize,
}

impl Layout {
    /// The layout of `dims`-value vectors at `precision`, or why pgvector cannot index them.
    pub fn new(precision: &str, dims: usize) -> Result<Layout, String> {
        let (kind, most) = match precision {
            "f32" => ("vector", MAX_DIMS_VECTOR),
            _ => ("halfvec", MAX_DIMS_HALFVEC),
        };
        if dims == 0 || dims > most {
            return Err(format!("pgvector's HNSW indexes {kind} of at most {most} values; these have {dims}"));
        }
        Ok(Layout { kind, dims })
    }

    /// pgvector's type: `vector` or `halfvec`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    fn ops(&self) -> &'static str {
        match self.kind {
            "vector" => "vector_cosine_ops",
            _ => "halfvec_cosine_ops",
        }
    }
}

/// The table of `build`: a fixed prefix and the build's hex digits, so nothing outside is
/// ever spliced into SQL.
pub fn table(build: Uuid) -> String {
    format!("embedding_vectors_{}", build.simple())
}

/// `[v1,v2,…]`, pgvector's text form; each value printed so it reads back exactly.
fn literal(vector: &[f32]) -> String {
    let mut text = String::with_capacity(vector.len() * 12 + 2);
    text.push('[');
    for (at, value) in vector.iter().enumerate() {
        if at > 0 {
            text.push(',');
        }
        text.push_str(&value.to_string());
    }
    text.push(']');
    text
}

/// A PostgreSQL array literal of `items` (`{"…","…"}`), each element quoted and escaped.
fn array_literal<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let mut text = String::from("{");
    for (at, item) in items.enumerate() {
        if at > 0 {
            text.push(',');
        }
        text.push('"');
        text.push_str(&item.replace('\\', "\\\\").replace('"', "\\\""));
        text.push('"');
    }
    text.push('}');
    text
}

/// A build in the making: registered under its set, its table made for `layout`.
pub struct Build {
    pub build: Uuid,
    table: String,
    layout: Layout,
}

impl Build {
    /// Registers build `build` of set `set`, then makes its table.
    pub async fn start(db: &DatabaseConnection, set: &str, build: Uuid, layout: Layout) -> Result<Build, DbErr> {
        let row = embedding_pgvector_build::ActiveModel {
            build: Set(build),
            set_name: Set(set.to_owned()),
            created_at: Set(clock::now()),
        };
        embedding_pgvector_build::Entity::insert(row).exec_without_returning(db).await?;
        let table = table(build);
        let sql =
            format!("CREATE TABLE {table} (item bigint PRIMARY KEY, vec {}({}) NOT NULL)", layout.kind, layout.dims);
        db.execute_unprepared(&sql).await?;
        Ok(Build { build, table, layout })
    }

    /// Adds a page of items and their vectors (`items.len() × dims`, row-major), in
    /// statements of a few megabytes of text.
    pub async fn add(&self, db: &DatabaseConnection, items: &[i64], vectors: &[f32]) -> Result<(), DbErr> {
        let dims = self.layout.dims;
        if vectors.len() != items.len() * dims {
            return Err(DbErr::Custom(format!("vectors of another length than {dims}")));
        }
        let sql = format!(
            "INSERT INTO {} (item, vec) SELECT item, vec::{} FROM unnest($1::bigint[], $2::text[]) AS page(item, vec)",
            self.table, self.layout.kind
        );
        // About 12 characters a value.
        let rows = (STATEMENT_BYTES / (dims * 12)).max(1);
        for (items, vectors) in items.chunks(rows).zip(vectors.chunks(rows * dims)) {
            let items = format!("{{{}}}", items.iter().map(i64::to_string).collect::<Vec<_>>().join(","));
            let texts: Vec<String> = vectors.chunks_exact(dims).map(literal).collect();
            let vectors = array_literal(texts.iter().map(String::as_str));
            let values = [items.into(), vectors.into()];
            db.execute_raw(Statement::from_sql_and_values(DbBackend::Postgres, &sql, values)).await?;
        }
        Ok(())
    }

    /// Builds the HNSW index over the table (`connectivity` and `expansion_add` within
    /// pgvector's limits); the table's size with it, in bytes.
    pub async fn index(&self, db: &DatabaseConnection, settings: &IndexSettings) -> Result<i64, DbErr> {
        let links = settings.connectivity.clamp(2, MAX_LINKS);
        let expansion = settings.expansion_add.clamp(2 * links, MAX_EXPANSION);
        let txn = db.begin().await?;
        // pgvector builds fastest when the graph fits this; the server's default is 64 MB.
        txn.execute_unprepared("SET LOCAL maintenance_work_mem = '512MB'").await?;
        let sql = format!(
            "CREATE INDEX ON {} USING hnsw (vec {}) WITH (m = {links}, ef_construction = {expansion})",
            self.table,
            self.layout.ops()
        );
        txn.execute_unprepared(&sql).await?;
        txn.commit().await?;
        let size = format!("SELECT pg_total_relation_size('{}')::bigint AS bytes", self.table);
        let row = db.query_one_raw(Statement::from_string(DbBackend::Postgres, size)).await?;
        Ok(row.map(|row| row.try_get::<i64>("", "bytes")).transpose()?.unwrap_or(0))
    }
}

/// Drops the tables of set `set`'s builds other than `keep` (all of them when `None`) and
/// their registrations, inside `txn` (PostgreSQL's DDL is transactional). On SQLite the
/// registry is empty.
pub async fn drop_others(txn: &impl ConnectionTrait, set: &str, keep: Option<Uuid>) -> Result<(), DbErr> {
    let mut others = embedding_pgvector_build::Entity::find()
        .select_only()
        .column(embedding_pgvector_build::Column::Build)
        .filter(embedding_pgvector_build::Column::SetName.eq(set));
    if let Some(keep) = keep {
        others = others.filter(embedding_pgvector_build::Column::Build.ne(keep));
    }
    let builds: Vec<Uuid> = others.into_tuple().all(txn).await?;
    drop_builds(txn, builds).await
}

/// Drops build `build`'s table, if it made one, and its registration.
pub async fn drop_build(txn: &impl ConnectionTrait, build: Uuid) -> Result<(), DbErr> {
    let registered = embedding_pgvector_build::Entity::find_by_id(build).one(txn).await?;
    drop_builds(txn, registered.into_iter().map(|row| row.build).collect()).await
}

async fn drop_builds(txn: &impl ConnectionTrait, builds: Vec<Uuid>) -> Result<(), DbErr> {
    if builds.is_empty() {
        return Ok(());
    }
    for build in &builds {
        txn.execute_unprepared(&format!("DROP TABLE IF EXISTS {}", table(*build))).await?;
    }
    embedding_pgvector_build::Entity::delete_many()
        .filter(embedding_pgvector_build::Column::Build.is_in(builds))
        .exec(txn)
        .await?;
    Ok(())
}

/// Up to `candidates` items of `index`'s build nearest each query, nearest first (only
/// items with labels when `labelled_only`, read through pgvector's iterative scan), with
/// the candidate list `expansion` (within pgvector's limit).
pub async fn search(
    db: &DatabaseConnection,
    index: &embedding_index::Model,
    queries: &[Vec<f32>],
    candidates: usize,
    expansion: usize,
    labelled_only: bool,
) -> Result<Vec<Vec<i64>>, DbErr> {
    let table = table(index.build);
    let txn = db.begin().await?;
    // The type the build made its table with (`vector` or `halfvec`), whatever the
    // precision setting says now; a table that is gone is an error (ranked exactly).
    let kind = Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT format_type(atttypid, NULL) AS kind FROM pg_attribute \
         WHERE attrelid = to_regclass($1) AND attname = 'vec'",
        [table.clone().into()],
    );
    let kind: String = match txn.query_one_raw(kind).await? {
        Some(row) => row.try_get("", "kind")?,
        None => return Err(DbErr::Custom(format!("the index table {table} is gone"))),
    };
    let layout =
        Layout::new(if kind == "vector" { "f32" } else { "f16" }, index.dims as usize).map_err(DbErr::Custom)?;
    let expansion = expansion.max(candidates).clamp(1, MAX_EXPANSION);
    txn.execute_unprepared(&format!("SET LOCAL hnsw.ef_search = {expansion}")).await?;
    let filter = if labelled_only {
        // Without it, a filter keeps only what the first candidate list holds.
        txn.execute_unprepared("SET LOCAL hnsw.iterative_scan = relaxed_order").await?;
        "WHERE EXISTS (SELECT 1 FROM embedding e WHERE e.set_name = $3 AND e.item = v.item AND e.labels IS NOT NULL)"
    } else {
        ""
    };
    let sql = format!("SELECT v.item FROM {table} v {filter} ORDER BY v.vec <=> $1::{} LIMIT $2", layout.kind);
    let mut found = Vec::with_capacity(queries.len());
    for query in queries {
        let mut values: Vec<Value> = vec![literal(query).into(), (candidates as i64).into()];
        if labelled_only {
            values.push(index.set_name.clone().into());
        }
        let rows = txn.query_all_raw(Statement::from_sql_and_values(DbBackend::Postgres, &sql, values)).await?;
        found.push(rows.iter().map(|row| row.try_get::<i64>("", "item")).collect::<Result<Vec<_>, _>>()?);
    }
    txn.commit().await?;
    Ok(found)
}
