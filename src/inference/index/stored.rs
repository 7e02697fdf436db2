//! A set's index in the store: its row (`embedding_index`) and its file in parts
//! (`embedding_index_part`). A build uploads its parts under a fresh build id, then
//! publishes them with a compare-and-set on the set's vectors revision, so a build of rows
//! since written again is never published; publishing deletes the set's other builds. A
//! process fetches a build's file part by part into its own directory, once per build.

use std::path::{Path, PathBuf};

use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter,
    TransactionTrait,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

use crate::inference::entity::{embedding_index, embedding_index_part, embedding_set};
use crate::store::clock;

/// Bytes per stored part.
pub const PART_BYTES: usize = 8 << 20;

/// What the index of a set is called in results and rows.
pub const HNSW: &str = "hnsw";

/// Set `set`'s index, if one was built from its vectors of revision `vectors_revision`.
pub async fn built_from(
    db: &DatabaseConnection,
    set: &str,
    vectors_revision: i64,
) -> Result<Option<embedding_index::Model>, DbErr> {
    let row = embedding_index::Entity::find_by_id(set.to_owned()).one(db).await?;
    Ok(row.filter(|row| row.vectors_revision == vectors_revision))
}

/// The set's index, if one was built from its current vectors.
pub async fn current(
    db: &DatabaseConnection,
    set: &embedding_set::Model,
) -> Result<Option<embedding_index::Model>, DbErr> {
    built_from(db, &set.name, set.vectors_revision).await
}

/// Stores the file at `path` as the parts of build `build` of set `set`; its length.
pub async fn upload(db: &DatabaseConnection, set: &str, build: Uuid, path: &Path) -> Result<(u64, i64), UploadError> {
    let mut file = tokio::fs::File::open(path).await?;
    let mut part = 0_i64;
    let mut length = 0_u64;
    loop {
        let mut bytes = Vec::with_capacity(PART_BYTES);
        (&mut file).take(PART_BYTES as u64).read_to_end(&mut bytes).await?;
        if bytes.is_empty() {
            break;
        }
        length += bytes.len() as u64;
        let row = embedding_index_part::ActiveModel {
            set_name: Set(set.to_owned()),
            build: Set(build),
            part: Set(part),
            bytes: Set(bytes),
        };
        embedding_index_part::Entity::insert(row).exec_without_returning(db).await?;
        part += 1;
    }
    Ok((length, part))
}

/// Why a build's file could not be stored or fetched.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error(transparent)]
    Database(#[from] DbErr),
    #[error("the index file: {0}")]
    File(#[from] std::io::Error),
    #[error("build {0} of the index is gone (a newer build replaced it)")]
    Gone(Uuid),
}

/// The published row, as [`publish`] writes it.
pub struct Published {
    pub set: String,
    pub build: Uuid,
    /// [`HNSW`] (a file in parts) or [`super::pgvector::PGVECTOR`] (a table).
    pub method: &'static str,
    pub vectors_revision: i64,
    pub items: i64,
    pub dims: i64,
    pub bytes: i64,
    pub parts: i64,
}

/// Makes build `published` the set's index if the set's vectors are still the revision it
/// was built from (compare-and-set, in one transaction with the set's row locked), and
/// deletes the set's other builds (their parts, and their pgvector tables). `false` when
/// the set moved on: the build's own parts or table are deleted and nothing else changes.
pub async fn publish(db: &DatabaseConnection, published: Published) -> Result<bool, DbErr> {
    let txn = db.begin().await?;
    // Locks the set's row where the database can (PostgreSQL); SQLite's writer is alone.
    let current = embedding_set::Entity::update_many()
        .col_expr(embedding_set::Column::VectorsRevision, Expr::col(embedding_set::Column::VectorsRevision))
        .filter(embedding_set::Column::Name.eq(&published.set))
        .filter(embedding_set::Column::VectorsRevision.eq(published.vectors_revision))
        .exec(&txn)
        .await?
        .rows_affected
        == 1;
    let keep = if current { published.build } else { Uuid::nil() };
    if current {
        let row = embedding_index::ActiveModel {
            set_name: Set(published.set.clone()),
            build: Set(published.build),
            vectors_revision: Set(published.vectors_revision),
            method: Set(published.method.into()),
            items: Set(published.items),
            dims: Set(published.dims),
            bytes: Set(published.bytes),
            parts: Set(published.parts),
            built_at: Set(clock::now()),
        };
        let columns = [
            embedding_index::Column::Build,
            embedding_index::Column::VectorsRevision,
            embedding_index::Column::Method,
            embedding_index::Column::Items,
            embedding_index::Column::Dims,
            embedding_index::Column::Bytes,
            embedding_index::Column::Parts,
            embedding_index::Column::BuiltAt,
        ];
        let replace = OnConflict::column(embedding_index::Column::SetName).update_columns(columns).to_owned();
        embedding_index::Entity::insert(row).on_conflict(replace).exec_without_returning(&txn).await?;
    }
    let others =
        embedding_index_part::Entity::delete_many().filter(embedding_index_part::Column::SetName.eq(&published.set));
    let others = if current {
        others.filter(embedding_index_part::Column::Build.ne(keep))
    } else {
        others.filter(embedding_index_part::Column::Build.eq(published.build))
    };
    others.exec(&txn).await?;
    match current {
        true => super::pgvector::drop_others(&txn, &published.set, Some(keep)).await?,
        false => super::pgvector::drop_build(&txn, published.build).await?,
    }
    txn.commit().await?;
    Ok(current)
}

/// Deletes the index of set `set` and every part stored for it.
pub async fn forget(db: &impl ConnectionTrait, set: &str) -> Result<(), DbErr> {
    embedding_index_part::Entity::delete_many().filter(embedding_index_part::Column::SetName.eq(set)).exec(db).await?;
    super::pgvector::drop_others(db, set, None).await?;
    embedding_index::Entity::delete_many().filter(embedding_index::Column::SetName.eq(set)).exec(db).await?;
    Ok(())
}

/// The path of `build`'s file in `dir`.
pub fn cached(dir: &Path, build: Uuid) -> PathBuf {
    dir.join(format!("{build}.usearch"))
}

/// The file of `index`'s build in `dir`, fetched from the store unless already there
/// (whole: written aside and renamed into place). One part is in memory at a time.
pub async fn fetch(
    db: &DatabaseConnection,
    dir: &Path,
    index: &embedding_index::Model,
) -> Result<PathBuf, UploadError> {
    let path = cached(dir, index.build);
    if tokio::fs::metadata(&path).await.is_ok_and(|meta| meta.len() == index.bytes as u64) {
        return Ok(path);
    }
    tokio::fs::create_dir_all(dir).await?;
    let aside = dir.join(format!("{}.{}.partial", index.build, Uuid::new_v4()));
    let written = write_parts(db, &aside, index).await;
    if let Err(err) = written {
        let _ = tokio::fs::remove_file(&aside).await;
        return Err(err);
    }
    tokio::fs::rename(&aside, &path).await?;
    Ok(path)
}

async fn write_parts(db: &DatabaseConnection, aside: &Path, index: &embedding_index::Model) -> Result<(), UploadError> {
    let mut file = tokio::fs::File::create(aside).await?;
    let mut length = 0_u64;
    for part in 0..index.parts {
        let row = embedding_index_part::Entity::find_by_id((index.build, part))
            .one(db)
            .await?
            .ok_or(UploadError::Gone(index.build))?;
        length += row.bytes.len() as u64;
        file.write_all(&row.bytes).await?;
    }
    if length != index.bytes as u64 {
        return Err(UploadError::Gone(index.build));
    }
    file.sync_all().await?;
    Ok(())
}
