//! `PUT /embeddings/{set}/labels`: labels given to a stored set's items after it was
//! computed (PROTEA's annotations arrive apart from the sequences), replacing each named
//! item's labels, all or none in one transaction. Another room's set is a 404, as a
//! missing one; a read-only token may not write.

use actix_web::web;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, TransactionTrait};
use serde::{Deserialize, Serialize};

use super::api::{locate, not_found};
use super::entity::embedding;
use super::sets;
use crate::auth::Caller;
use crate::http::{ApiError, AppState, Code, Problem};
use crate::store::StoreError;

/// Most items relabelled in one request.
pub const MAX_ITEMS: usize = 10_000;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LabelsQuery {
    /// The set's room; default: the caller's default room.
    #[param(pattern = r"^(@global|@internal|[^@:\u0000-\u001f\u007f-\u009f]{1,64})$")]
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelsRequest {
    /// 1 to 10,000 items, each once.
    #[schema(min_items = 1, max_items = 10000)]
    pub items: Vec<ItemLabels>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ItemLabels {
    /// The item's position in the set (from 0).
    #[serde(deserialize_with = "crate::http::required_whole_number")]
    #[schema(minimum = 0, maximum = 8_999_999_999_999_999_i64)]
    pub item: i64,
    /// Its labels from now on (an empty list: none): up to 1,000, each 1 to 256 characters
    /// without control characters.
    #[schema(max_items = 1000)]
    pub labels: Vec<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LabelsWritten {
    pub set: String,
    pub room: String,
    /// Items whose labels were replaced.
    pub updated: u64,
}

/// Replaces the labels of the named items of a set.
#[utoipa::path(
    put, path = "/embeddings/{set}/labels", tag = "inference", operation_id = "put_embedding_labels",
    params(("set" = String, Path, description = "The set's name: 1-200 of `A-Z a-z 0-9 . _ -`",
        pattern = "^[A-Za-z0-9._-]{1,200}$"), LabelsQuery),
    request_body = LabelsRequest,
    responses(
        (status = 200, description = "The labels were replaced", body = LabelsWritten),
        (status = 400, description = "`invalid_set_name`, `invalid_room_id`, `invalid_query`, `invalid_json`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`read_only_token`, `room_forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`set_not_found`: no such set in that room, or a room the caller cannot see; `item_not_found`: no such item in the set (nothing is written)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`, `invalid_labels`, `nul_character`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn put(
    state: web::Data<AppState>,
    caller: Caller,
    name: web::Path<String>,
    query: web::Query<LabelsQuery>,
    body: web::Json<LabelsRequest>,
) -> Result<web::Json<LabelsWritten>, ApiError> {
    let (room, key) = locate(&caller, &name, query.room.as_deref())?;
    caller.may_write(room.as_str())?;
    let items = body.into_inner().items;
    check(&items)?;
    let txn = state.db.begin().await.map_err(StoreError::from)?;
    // First the set's revision: its row stays locked (a re-run of its job waits), and a
    // process that cached the set reads the new labels.
    if !sets::new_labels_revision(&txn, &key).await.map_err(StoreError::from)? {
        return Err(not_found(&name, &room));
    }
    for (at, item) in items.iter().enumerate() {
        let labels = sets::stored_labels(&item.labels);
        // Keyed by the set and the item: a row that is not there moves nothing.
        let moved = embedding::Entity::update_many()
            .set(embedding::ActiveModel { labels: Set(labels), ..Default::default() })
            .filter(embedding::Column::SetName.eq(&key))
            .filter(embedding::Column::Item.eq(item.item))
            .exec(&txn)
            .await
            .map_err(StoreError::from)?
            .rows_affected;
        if moved == 0 {
            let detail = format!("set {:?} has no item {}; nothing was written", name.as_str(), item.item);
            return Err(ApiError::new(Code::ItemNotFound, detail).at(format!("/items/{at}/item")));
        }
    }
    txn.commit().await.map_err(StoreError::from)?;
    let written = LabelsWritten { set: name.into_inner(), room: room.into(), updated: items.len() as u64 };
    Ok(web::Json(written))
}

/// The request's items: 1 to [`MAX_ITEMS`], each once, their labels as `compute_embeddings`
/// takes them.
fn check(items: &[ItemLabels]) -> Result<(), ApiError> {
    if items.is_empty() || items.len() > MAX_ITEMS {
        let detail = format!("items must hold 1 to {MAX_ITEMS} items");
        return Err(ApiError::new(Code::InvalidLabels, detail).at("/items"));
    }
    let mut seen = std::collections::HashSet::new();
    for (at, item) in items.iter().enumerate() {
        if !seen.insert(item.item) {
            let detail = format!("item {} is named twice", item.item);
            return Err(ApiError::new(Code::InvalidLabels, detail).at(format!("/items/{at}/item")));
        }
        if let Some(index) = item.labels.iter().position(|label| label.contains('\0')) {
            let detail = "a NUL character (\\u0000) cannot be stored";
            return Err(ApiError::new(Code::NulCharacter, detail).at(format!("/items/{at}/labels/{index}")));
        }
        if let Err(detail) = sets::check_labels(std::slice::from_ref(&item.labels), 1) {
            let detail = detail.replace("labels[0]", &format!("item {}", item.item));
            return Err(ApiError::new(Code::InvalidLabels, detail).at(format!("/items/{at}/labels")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_holds_one_to_ten_thousand_distinct_items() {
        let items = |count: i64| (0..count).map(|item| ItemLabels { item, labels: Vec::new() }).collect::<Vec<_>>();
        assert!(check(&items(10_000)).is_ok());
        for refused in [items(0), items(10_001)] {
            let problem = format!("{:?}", check(&refused).unwrap_err());
            assert!(problem.contains("InvalidLabels"), "{problem}");
        }
    }
}
