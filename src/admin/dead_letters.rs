//! Operator endpoints: a queue's dead letters (summary, replay, purge).

use actix_web::web;
use serde::Deserialize;

use crate::dead_letters::{self, Selection, Settled, Summary};
use crate::domain::QueueName;
use crate::http::{ApiError, AppState, Code, Problem};

/// Most dead letters read by one call.
const MAX_LIMIT: usize = 10_000;
const DEFAULT_LIMIT: usize = 1_000;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SummaryQuery {
    /// The queue whose dead letters to read.
    #[param(pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub queue: String,
    /// Dead letters read at most; default 1000.
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<usize>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettleRequest {
    #[schema(pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub queue: String,
    /// Only dead letters with this reason (`not_a_job_id`, `unknown_job`, `oversized`, …).
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default, deserialize_with = "crate::http::whole_number")]
    #[schema(minimum = 1, maximum = 10000)]
    pub limit: Option<usize>,
    /// Report what would happen, change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// A queue's dead letters: how many, why, and samples.
#[utoipa::path(
    get, path = "/admin/dead-letters", tag = "admin", operation_id = "dead_letter_summary",
    params(SummaryQuery),
    responses(
        (status = 200, description = "The summary", body = Summary),
        (status = 503, description = "`not_ready`: the transport does not answer; `store_unavailable`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn summary(
    state: web::Data<AppState>,
    query: web::Query<SummaryQuery>,
) -> Result<web::Json<Summary>, ApiError> {
    // Faults in a query string are 400s, like every other query's.
    let as_query = |err: ApiError| ApiError::new(Code::InvalidQuery, err.detail);
    let queue = queue_name(&query.queue).map_err(as_query)?;
    let limit = limit(query.limit).map_err(as_query)?;
    let summary =
        dead_letters::summarise(state.transport.as_ref(), queue.as_str(), limit).await.map_err(unavailable)?;
    Ok(web::Json(summary))
}

/// Publishes matching dead letters back onto their queue.
#[utoipa::path(
    post, path = "/admin/dead-letters/replay", tag = "admin", operation_id = "replay_dead_letters",
    request_body = SettleRequest,
    responses(
        (status = 200, description = "What was replayed", body = Settled),
        (status = 422, description = "`invalid_queue`, `invalid_request`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`not_ready`: the transport does not answer; `store_unavailable`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn replay(
    state: web::Data<AppState>,
    body: web::Json<SettleRequest>,
) -> Result<web::Json<Settled>, ApiError> {
    let (queue, selection) = selection(body.into_inner())?;
    let settled =
        dead_letters::replay(state.transport.as_ref(), queue.as_str(), &selection).await.map_err(unavailable)?;
    Ok(web::Json(settled))
}

/// Deletes matching dead letters.
#[utoipa::path(
    post, path = "/admin/dead-letters/purge", tag = "admin", operation_id = "purge_dead_letters",
    request_body = SettleRequest,
    responses(
        (status = 200, description = "What was deleted", body = Settled),
        (status = 422, description = "`invalid_queue`, `invalid_request`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`not_ready`: the transport does not answer; `store_unavailable`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn purge(state: web::Data<AppState>, body: web::Json<SettleRequest>) -> Result<web::Json<Settled>, ApiError> {
    let (queue, selection) = selection(body.into_inner())?;
    let settled =
        dead_letters::purge(state.transport.as_ref(), queue.as_str(), &selection).await.map_err(unavailable)?;
    Ok(web::Json(settled))
}

fn selection(request: SettleRequest) -> Result<(QueueName, Selection), ApiError> {
    let queue = queue_name(&request.queue)?;
    let selection = Selection { reason: request.reason, limit: limit(request.limit)?, dry_run: request.dry_run };
    Ok((queue, selection))
}

fn queue_name(name: &str) -> Result<QueueName, ApiError> {
    QueueName::parse(name).map_err(|err| ApiError::new(Code::InvalidQueue, err))
}

fn limit(requested: Option<usize>) -> Result<usize, ApiError> {
    match requested {
        None => Ok(DEFAULT_LIMIT),
        Some(limit) if (1..=MAX_LIMIT).contains(&limit) => Ok(limit),
        Some(_) => Err(ApiError::new(Code::InvalidRequest, format!("limit must be between 1 and {MAX_LIMIT}"))),
    }
}

fn unavailable(err: crate::transport::TransportError) -> ApiError {
    ApiError::new(Code::NotReady, format!("transport: {err}"))
}
