//! `GET /embeddings/{set}`: a stored set, a page of its items at a time, with the state of
//! the job that computes it.

use actix_web::web;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::sets::{self, check_set_name, Item};
use crate::api::{ApiError, AppState, Code};
use crate::domain::JobStatus;
use crate::store::StoreError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItemsQuery {
    /// Only items after this one (the `next_after` of the previous page).
    pub after: Option<i64>,
    pub limit: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct StoredItem {
    pub item: i64,
    pub input: String,
    pub vector: Vec<f32>,
}

#[derive(Debug, Serialize)]
pub struct SetPage {
    pub set: String,
    /// The `compute_embeddings` job that computes the set, and its state: the set is whole
    /// once it SUCCEEDED.
    pub job_id: Uuid,
    pub job_status: Option<JobStatus>,
    /// How many inputs the set has.
    pub inputs: i64,
    pub items: Vec<StoredItem>,
    /// Pass as `after` for the next page; `null` on the last page.
    pub next_after: Option<i64>,
}

/// One page of a set's items, in item order.
pub async fn get(
    state: web::Data<AppState>,
    name: web::Path<String>,
    query: web::Query<ItemsQuery>,
) -> Result<web::Json<SetPage>, ApiError> {
    check_set_name(&name).map_err(|err| ApiError::new(Code::InvalidSetName, err))?;
    let limit = crate::api::jobs::page_size(query.limit, state.max_page_size)?;
    let db = &state.db;
    let Some(set) = sets::find(db, &name).await.map_err(StoreError::from)? else {
        return Err(ApiError::new(Code::SetNotFound, format!("no embedding set {:?}", name.as_str())));
    };
    let job_status = state.store.get(set.job_id).await?.map(|job| job.status);
    let items = sets::page(db, &name, query.after, limit).await.map_err(StoreError::from)?;
    let next_after = (items.len() as u64 == limit).then(|| items.last().map(|item| item.item)).flatten();
    let items = items.into_iter().map(|Item { item, input, vector }| StoredItem { item, input, vector }).collect();
    Ok(web::Json(SetPage { set: set.name, job_id: set.job_id, job_status, inputs: set.inputs, items, next_after }))
}
