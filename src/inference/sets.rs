//! Stored embedding sets: a set is claimed by the job that computes it, its rows arrive
//! batch by batch from the write queue (each batch once), and it is read back by page or
//! whole for nearest-neighbour search. Needs no libtorch: a build without inference still
//! serves the sets stored by one with it. Every function here takes a set's stored [`key`]
//! (room and name), never a bare name.

use sea_orm::sea_query::{Expr, ExprTrait, InsertStatement, OnConflict, Query};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect, TryInsertResult,
};
use uuid::Uuid;

use super::entity::{embedding, embedding_set};
use crate::store::clock;

/// Longest set name.
pub const MAX_SET_NAME: usize = 200;

/// A set name: 1 to 200 of `A-Z a-z 0-9 . _ -`.
pub fn check_set_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > MAX_SET_NAME || !name.chars().all(allowed) {
        return Err(format!("a set name is 1 to {MAX_SET_NAME} of the characters A-Z a-z 0-9 . _ -"));
    }
    Ok(())
}

/// The stored key of set `name` in `room`: sets are per room, so one tenant's name never
/// meets another's. Unambiguous, since a room id holds no `:`.
pub fn key(room: &str, name: &str) -> String {
    format!("{room}:{name}")
}

/// The set's name in a stored key (what users see).
pub fn name_of(key: &str) -> &str {
    key.split_once(':').map_or(key, |(_, name)| name)
}

/// One stored input, its vector and its labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub item: i64,
    pub input: String,
    pub vector: Vec<f32>,
    pub labels: Vec<String>,
}

/// Most labels on one item, and the longest label.
pub const MAX_LABELS: usize = 1_000;
pub const MAX_LABEL: usize = 256;

/// Labels for `count` inputs: one list per input (an empty list: none), each label 1 to
/// [`MAX_LABEL`] characters without control characters, at most [`MAX_LABELS`] a list.
pub fn check_labels(labels: &[Vec<String>], count: usize) -> Result<(), String> {
    if labels.len() != count {
        return Err(format!("labels must hold one list per input: {} lists for {count} inputs", labels.len()));
    }
    for (at, list) in labels.iter().enumerate() {
        if list.len() > MAX_LABELS {
            return Err(format!("labels[{at}] holds {} labels; the most is {MAX_LABELS}", list.len()));
        }
        let bad = |label: &String| {
            label.is_empty() || label.chars().count() > MAX_LABEL || label.chars().any(char::is_control)
        };
        if let Some(label) = list.iter().find(|label| bad(label)) {
            return Err(format!(
                "labels[{at}] holds {label:?}: a label is 1 to {MAX_LABEL} characters, none of them control characters"
            ));
        }
    }
    Ok(())
}

/// Labels as stored: a JSON array, or null for none.
pub(super) fn stored_labels(labels: &[String]) -> Option<String> {
    (!labels.is_empty()).then(|| serde_json::to_string(labels).unwrap_or_default())
}

fn read_labels(stored: Option<&str>) -> Vec<String> {
    stored.and_then(|text| serde_json::from_str(text).ok()).unwrap_or_default()
}

/// Why a set could not be claimed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("set {name:?} belongs to job {owner}")]
    Taken { name: String, owner: Uuid },
    #[error(transparent)]
    Database(#[from] DbErr),
}

/// Claims `name` for `job_id` with `inputs` inputs. The job's own re-run finds the set
/// already its own and starts it afresh (its earlier rows are deleted); another job's set is
/// refused.
pub async fn claim(db: &impl ConnectionTrait, name: &str, job_id: Uuid, inputs: i64) -> Result<(), ClaimError> {
    let row = embedding_set::ActiveModel {
        name: Set(name.to_owned()),
        job_id: Set(job_id),
        inputs: Set(inputs),
        created_at: Set(clock::now()),
        labels_revision: Set(0),
        vectors_revision: Set(0),
    };
    let inserted = embedding_set::Entity::insert(row)
        .on_conflict_do_nothing_on([embedding_set::Column::Name])
        .exec_without_returning(db)
        .await?;
    if matches!(inserted, TryInsertResult::Inserted(1)) {
        return Ok(());
    }
    // Compare-and-set on the owner: only this job's set takes the new count (and new
    // revisions: its rows are written again, labels given later gone, its index stale).
    let moved = embedding_set::Entity::update_many()
        .col_expr(embedding_set::Column::Inputs, inputs.into())
        .col_expr(embedding_set::Column::LabelsRevision, Expr::col(embedding_set::Column::LabelsRevision).add(1))
        .col_expr(embedding_set::Column::VectorsRevision, Expr::col(embedding_set::Column::VectorsRevision).add(1))
        .filter(embedding_set::Column::Name.eq(name))
        .filter(embedding_set::Column::JobId.eq(job_id))
        .exec(db)
        .await?
        .rows_affected;
    if moved == 0 {
        let owner = embedding_set::Entity::find_by_id(name.to_owned()).one(db).await?.map(|set| set.job_id);
        return Err(ClaimError::Taken { name: name.to_owned(), owner: owner.unwrap_or_default() });
    }
    embedding::Entity::delete_many().filter(embedding::Column::SetName.eq(name)).exec(db).await?;
    Ok(())
}

/// The insert of one batch's rows at their items (positions), each vector already [`encode`]d,
/// skipped where already stored, so a batch written twice (a redelivery) leaves the first.
/// `labels` is one list per input, or empty when the batch has none.
pub fn insert_rows(
    set: &str,
    items: &[i64],
    inputs: &[String],
    vectors: Vec<Vec<u8>>,
    labels: &[Vec<String>],
) -> InsertStatement {
    let mut insert = Query::insert();
    insert.into_table(embedding::Entity).columns([
        embedding::Column::SetName,
        embedding::Column::Item,
        embedding::Column::Input,
        embedding::Column::Vector,
        embedding::Column::Labels,
    ]);
    for (at, ((item, input), vector)) in items.iter().zip(inputs).zip(vectors).enumerate() {
        let labels = labels.get(at).and_then(|labels| stored_labels(labels));
        let values = [set.into(), (*item).into(), input.as_str().into(), vector.into(), labels.into()];
        insert.values_panic(values);
    }
    insert.on_conflict(
        OnConflict::columns([embedding::Column::SetName, embedding::Column::Item]).do_nothing().to_owned(),
    );
    insert
}

/// Raises the labels revision of set `name`, inside the transaction that replaces labels: the
/// set's row is locked until it commits. `false` when there is no such set.
pub async fn new_labels_revision(txn: &impl ConnectionTrait, name: &str) -> Result<bool, DbErr> {
    let moved = embedding_set::Entity::update_many()
        .col_expr(embedding_set::Column::LabelsRevision, Expr::col(embedding_set::Column::LabelsRevision).add(1))
        .filter(embedding_set::Column::Name.eq(name))
        .exec(txn)
        .await?
        .rows_affected;
    Ok(moved == 1)
}

/// How many of a set's stored items carry labels.
pub async fn labelled(db: &DatabaseConnection, name: &str) -> Result<u64, DbErr> {
    embedding::Entity::find()
        .filter(embedding::Column::SetName.eq(name))
        .filter(embedding::Column::Labels.is_not_null())
        .count(db)
        .await
}

/// The set's row, if it exists.
pub async fn find(db: &DatabaseConnection, name: &str) -> Result<Option<embedding_set::Model>, DbErr> {
    embedding_set::Entity::find_by_id(name.to_owned()).one(db).await
}

fn item_of(row: embedding::Model) -> Item {
    Item { labels: read_labels(row.labels.as_deref()), item: row.item, input: row.input, vector: decode(&row.vector) }
}

/// Up to `limit` items after `after` (every item when `None`), in item order.
pub async fn page(db: &DatabaseConnection, name: &str, after: Option<i64>, limit: u64) -> Result<Vec<Item>, DbErr> {
    let mut query = embedding::Entity::find().filter(embedding::Column::SetName.eq(name));
    if let Some(after) = after {
        query = query.filter(embedding::Column::Item.gt(after));
    }
    let rows = query.order_by_asc(embedding::Column::Item).limit(limit).all(db).await?;
    Ok(rows.into_iter().map(item_of).collect())
}

/// Up to `limit` items after `after` (every item when `None`), in item order: their numbers
/// and vectors only, `(items, vectors)` with the vectors `items.len() × dims` row-major. A
/// vector of another length than the first is an error (the set was written by two models).
pub async fn vectors_page(
    db: &DatabaseConnection,
    name: &str,
    after: Option<i64>,
    limit: u64,
) -> Result<(Vec<i64>, Vec<f32>), DbErr> {
    let mut query = embedding::Entity::find()
        .select_only()
        .column(embedding::Column::Item)
        .column(embedding::Column::Vector)
        .filter(embedding::Column::SetName.eq(name));
    if let Some(after) = after {
        query = query.filter(embedding::Column::Item.gt(after));
    }
    let rows: Vec<(i64, Vec<u8>)> =
        query.order_by_asc(embedding::Column::Item).limit(limit).into_tuple().all(db).await?;
    let width = rows.first().map_or(0, |(_, bytes)| bytes.len());
    let mut items = Vec::with_capacity(rows.len());
    let mut vectors = Vec::with_capacity(rows.len() * width / 4);
    for (item, bytes) in rows {
        if bytes.len() != width {
            return Err(DbErr::Custom(format!("set {name:?} holds vectors of two lengths")));
        }
        items.push(item);
        vectors.extend(decode(&bytes));
    }
    Ok((items, vectors))
}

/// The stored items of the set among `items`, in item order.
pub async fn items(db: &DatabaseConnection, name: &str, items: &[i64]) -> Result<Vec<Item>, DbErr> {
    let rows = embedding::Entity::find()
        .filter(embedding::Column::SetName.eq(name))
        .filter(embedding::Column::Item.is_in(items.iter().copied()))
        .order_by_asc(embedding::Column::Item)
        .all(db)
        .await?;
    Ok(rows.into_iter().map(item_of).collect())
}

/// The items of the set that carry labels, in item order.
pub async fn labelled_items(db: &DatabaseConnection, name: &str) -> Result<Vec<i64>, DbErr> {
    embedding::Entity::find()
        .select_only()
        .column(embedding::Column::Item)
        .filter(embedding::Column::SetName.eq(name))
        .filter(embedding::Column::Labels.is_not_null())
        .order_by_asc(embedding::Column::Item)
        .into_tuple()
        .all(db)
        .await
}

/// How many items of the set are stored.
pub async fn stored(db: &DatabaseConnection, name: &str) -> Result<u64, DbErr> {
    embedding::Entity::find().filter(embedding::Column::SetName.eq(name)).count(db).await
}

/// Little-endian f32s.
pub fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|value| value.to_le_bytes()).collect()
}

/// The inverse of [`encode`]; a trailing partial float is dropped.
pub fn decode(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|chunk| f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_exactly() {
        let vector = vec![0.1_f32, -3.5e-12, f32::MAX, 0.0];
        assert_eq!(decode(&encode(&vector)), vector);
    }

    #[test]
    fn set_names_are_checked() {
        assert!(check_set_name("proteins-v2.1_a").is_ok());
        for bad in ["", "a b", "a/b", "@global", "x:y", &"a".repeat(201), "naïve"] {
            assert!(check_set_name(bad).is_err(), "{bad:?}");
        }
    }
}
