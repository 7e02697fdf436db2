//! `GET /embeddings/{set}`: a stored set of a room, a page of its items at a time, with the
//! state of the job that computes it. Another room's set is a 404, as a missing one.

use actix_web::web;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::sets::{self, check_set_name, Item};
use crate::auth::Caller;
use crate::domain::{JobStatus, RoomId};
use crate::http::{ApiError, AppState, Code, Problem};
use crate::store::StoreError;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ItemsQuery {
    /// The set's room; default: the caller's default room.
    #[param(pattern = r"^(@global|@internal|[^@:\u0000-\u001f\u007f-\u009f]{1,64})$")]
    pub room: Option<String>,
    /// Only items after this one (the `next_after` of the previous page).
    pub after: Option<i64>,
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StoredItem {
    pub item: i64,
    pub input: String,
    pub vector: Vec<f32>,
    /// The item's labels (given to `compute_embeddings`), for `transfer_annotations`.
    pub labels: Vec<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SetPage {
    pub set: String,
    pub room: String,
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

/// The room (`room`, else the caller's default) and stored key of set `name`: 400 for a bad
/// name or room, 404 for a room the caller cannot see, as for a set that is not there.
pub(super) fn locate(caller: &Caller, name: &str, room: Option<&str>) -> Result<(RoomId, String), ApiError> {
    check_set_name(name).map_err(|err| ApiError::new(Code::InvalidSetName, err))?;
    let room = match room {
        Some(room) => crate::http::room_id(room)?,
        None => caller.default_room(),
    };
    if !caller.can_read(room.as_str()) {
        return Err(not_found(name, &room));
    }
    let key = sets::key(room.as_str(), name);
    Ok((room, key))
}

pub(super) fn not_found(name: &str, room: &RoomId) -> ApiError {
    ApiError::new(Code::SetNotFound, format!("no embedding set {name:?} in room {room}"))
}

/// One page of a set's items, in item order.
#[utoipa::path(
    get, path = "/embeddings/{set}", tag = "inference", operation_id = "get_embedding_set",
    params(("set" = String, Path, description = "The set's name: 1-200 of `A-Z a-z 0-9 . _ -`",
        pattern = "^[A-Za-z0-9._-]{1,200}$"), ItemsQuery),
    responses(
        (status = 200, description = "A page of the set's items", body = SetPage),
        (status = 400, description = "`invalid_set_name`, `invalid_room_id`, `invalid_query`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`set_not_found`: no such set in that room, or a room the caller cannot see", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    name: web::Path<String>,
    query: web::Query<ItemsQuery>,
) -> Result<web::Json<SetPage>, ApiError> {
    let (room, key) = locate(&caller, &name, query.room.as_deref())?;
    let limit = crate::http::page_size(query.limit, state.max_page_size)?;
    let db = &state.db;
    let Some(set) = sets::find(db, &key).await.map_err(StoreError::from)? else { return Err(not_found(&name, &room)) };
    let job_status = state.store.get(set.job_id).await?.map(|job| job.status);
    let items = sets::page(db, &key, query.after, limit).await.map_err(StoreError::from)?;
    let next_after = (items.len() as u64 == limit).then(|| items.last().map(|item| item.item)).flatten();
    let items = items
        .into_iter()
        .map(|Item { item, input, vector, labels }| StoredItem { item, input, vector, labels })
        .collect();
    let set_name = sets::name_of(&set.name).to_owned();
    Ok(web::Json(SetPage {
        set: set_name,
        room: room.into(),
        job_id: set.job_id,
        job_status,
        inputs: set.inputs,
        items,
        next_after,
    }))
}
