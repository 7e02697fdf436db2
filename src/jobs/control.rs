//! Changing a job by request: cancel (with its unfinished descendants) and a manual retry.

use actix_web::web;
use uuid::Uuid;

use crate::auth::Caller;
use crate::domain::Job;
use crate::http::{ApiError, AppState, Code, Problem};

use super::read::find;

/// A job the caller may see and change (cancel, retry).
async fn find_writable(state: &AppState, caller: &Caller, id: Uuid) -> Result<Job, ApiError> {
    let job = find(state, caller, id).await?;
    caller.may_write(&job.room)?;
    Ok(job)
}

/// Cancels a QUEUED or RUNNING job and its unfinished descendants; a no-op on finished jobs.
#[utoipa::path(
    post, path = "/jobs/{id}/cancel", tag = "jobs", operation_id = "cancel_job",
    params(("id" = Uuid, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The job, CANCELLED (or as it was, if it had finished)", body = Job),
        (status = 403, description = "`room_forbidden` (`@global` for a member), `read_only_token`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`job_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn cancel(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<Uuid>,
) -> Result<web::Json<Job>, ApiError> {
    find_writable(&state, &caller, *id).await?;
    let cancellation = state.store.cancel(*id).await?;
    tracing::info!(job_id = %id, user = %caller.identity().user, "job cancelled by request");
    Ok(web::Json(cancellation.job))
}

/// Re-queues a FAILED or CANCELLED job by hand; any other state is a 409.
#[utoipa::path(
    post, path = "/jobs/{id}/retry", tag = "jobs", operation_id = "retry_job",
    params(("id" = Uuid, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The job, QUEUED again", body = Job),
        (status = 403, description = "`room_forbidden` (`@global` for a member), `read_only_token`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`job_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`invalid_transition`: the job is not FAILED or CANCELLED", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn retry(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<Uuid>,
) -> Result<web::Json<Job>, ApiError> {
    let job = find_writable(&state, &caller, *id).await?;
    if let Some(at) = job.cleaned_at {
        let detail = format!("job {id}'s files were removed at {at}: upload them again");
        return Err(ApiError::new(Code::ResultCleaned, detail));
    }
    let job = state.store.retry(*id).await?;
    tracing::info!(job_id = %id, user = %caller.identity().user, "job queued again by request");
    state.dispatcher.publish(&job).await;
    Ok(web::Json(job))
}
