//! `POST /jobs` and `POST /jobs:batch`: submissions checked by the rules, committed, then
//! published.

use std::collections::HashMap;

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::auth::Caller;
use crate::domain::Job;
use crate::http::{ApiError, AppState, Code, Problem};
use crate::remote::Remote;
use crate::store::StoreError;

use super::rules::{admit_type, check_parent, idempotency_header, place, validate_submission, SubmitRequest};
use super::settings::JobsSettings;

/// Most submissions in one `POST /jobs:batch`.
pub const MAX_BATCH: usize = 1000;

/// Submits a job.
#[utoipa::path(
    post, path = "/jobs", tag = "jobs", operation_id = "submit_job",
    request_body = SubmitRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Same as `idempotency_key` in the body",
        pattern = r"^[\t -~]{1,255}$")),
    responses(
        (status = 201, description = "Created", body = Job,
         headers(("Location" = String, description = "The job's URL"))),
        (status = 200, description = "An earlier submission with the same idempotency key made this job", body = Job,
         headers(("Location" = String, description = "The job's URL"))),
        (status = 403, description = "`room_forbidden`, `read_only_token`, `forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`dependency_not_found`: a job of `depends_on` is not in the job's room", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`idempotency_conflict`, `parent_is_coordinator`, `no_worker`, `dependency_failed`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`, `unknown_operation`, `invalid_payload`, `operation_unavailable`, \
            `unknown_queue`, `invalid_queue`, `parent_not_found`, `room_mismatch`, `nul_character`, `invalid_dependency`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn submit(
    state: web::Data<AppState>,
    settings: web::Data<JobsSettings>,
    remote: web::Data<Remote>,
    caller: Caller,
    req: HttpRequest,
    body: web::Json<SubmitRequest>,
) -> Result<HttpResponse, ApiError> {
    let header_key = idempotency_header(&req)?;
    let body = body.into_inner();
    let parent = check_parent(&state, &caller, body.parent_job_id).await?;
    let asked_room = body.room.is_some();
    let wait_for_worker = body.wait_for_worker;
    let mut new = validate_submission(&state.submissions(&settings), body, header_key, &caller.default_room())?;
    place(&caller, &mut new, asked_room, parent.as_ref())?;
    admit_type(&remote, &mut new, wait_for_worker).await?;
    let submission = state.dispatcher.submit(new).await?;
    let location = format!("/jobs/{}", submission.job.id);
    let mut response = match submission.created {
        true => HttpResponse::Created(),
        false => HttpResponse::Ok(),
    };
    Ok(response.insert_header((header::LOCATION, location)).json(submission.job))
}

/// Body of `POST /jobs:batch`; each item is read on its own, so a bad one is named.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// 1-1000 submissions of the `POST /jobs` shape.
    #[schema(value_type = Vec<SubmitRequest>, min_items = 1, max_items = 1000)]
    pub jobs: Vec<Value>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchItem {
    /// False when an earlier submission with the same key made the job.
    pub created: bool,
    #[serde(flatten)]
    pub job: Job,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchResponse {
    pub jobs: Vec<BatchItem>,
}

/// Submits up to [`MAX_BATCH`] jobs in one transaction: all are accepted or none is. An
/// invalid item is a problem whose `pointer` names it (`/jobs/3`). 201 when any job was
/// created, 200 when every one was an idempotent repeat.
#[utoipa::path(
    post, path = "/jobs:batch", tag = "jobs", operation_id = "submit_jobs",
    request_body = BatchRequest,
    responses(
        (status = 201, description = "At least one job was created", body = BatchResponse),
        (status = 200, description = "Every submission was an idempotent repeat", body = BatchResponse),
        (status = 403, description = "`room_forbidden`, `read_only_token`, `forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`dependency_not_found`: a job an item depends on is not in its room", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`idempotency_conflict`, `parent_is_coordinator`, `no_worker`, `dependency_failed`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An item is invalid: its problem, with a `pointer` such as `/jobs/3`; \
            `invalid_request` for an `Idempotency-Key` header", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn submit_batch(
    state: web::Data<AppState>,
    settings: web::Data<JobsSettings>,
    remote: web::Data<Remote>,
    caller: Caller,
    req: HttpRequest,
    body: web::Json<BatchRequest>,
) -> Result<HttpResponse, ApiError> {
    if req.headers().contains_key("Idempotency-Key") {
        let detail = "a batch takes no Idempotency-Key header: give each job its idempotency_key";
        return Err(ApiError::new(Code::InvalidRequest, detail));
    }
    let items = body.into_inner().jobs;
    if items.is_empty() || items.len() > MAX_BATCH {
        let detail = format!("jobs must hold 1-{MAX_BATCH} submissions, not {}", items.len());
        return Err(ApiError::new(Code::InvalidRequest, detail).at("/jobs"));
    }
    let (items, given) = name_references(items)?;
    let mut parents: HashMap<Uuid, Job> = HashMap::new();
    let default_room = caller.default_room();
    let mut jobs = Vec::with_capacity(items.len());
    for (at, item) in items.into_iter().enumerate() {
        let validated = async {
            let request: SubmitRequest =
                serde_json::from_value(item).map_err(|err| ApiError::new(Code::InvalidRequest, err.to_string()))?;
            if let Some(id) = request.parent_job_id.filter(|id| !parents.contains_key(id)) {
                parents.extend(check_parent(&state, &caller, Some(id)).await?.map(|parent| (id, parent)));
            }
            let parent = request.parent_job_id.and_then(|id| parents.get(&id));
            let asked_room = request.room.is_some();
            let wait_for_worker = request.wait_for_worker;
            let mut new = validate_submission(&state.submissions(&settings), request, None, &default_room)?;
            place(&caller, &mut new, asked_room, parent)?;
            admit_type(&remote, &mut new, wait_for_worker).await?;
            new.id = given.as_ref().map(|ids| ids[at]);
            Ok::<_, ApiError>(new)
        };
        jobs.push(validated.await.map_err(|err| err.at(format!("/jobs/{at}")))?);
    }
    let keys: Vec<Option<String>> = jobs.iter().map(|job| job.idempotency_key.clone()).collect();
    let dependencies: Vec<Vec<Uuid>> = jobs.iter().map(|job| job.depends_on.clone()).collect();
    let submissions = state.dispatcher.submit_many(jobs).await.map_err(|err| match err {
        StoreError::IdempotencyConflict(key) => {
            let at = keys.iter().position(|item| item.as_deref() == Some(key.as_str())).unwrap_or_default();
            ApiError::from(StoreError::IdempotencyConflict(key)).at(format!("/jobs/{at}/idempotency_key"))
        }
        StoreError::DependencyNotFound(id) | StoreError::DependencyFailed { id, .. } => {
            let pointer = dependencies.iter().enumerate().find_map(|(at, of)| {
                of.iter().position(|dependency| *dependency == id).map(|on| format!("/jobs/{at}/depends_on/{on}"))
            });
            let problem = ApiError::from(err);
            match pointer {
                Some(pointer) => problem.at(pointer),
                None => problem,
            }
        }
        err => ApiError::from(err),
    })?;
    let mut response = match submissions.iter().any(|submission| submission.created) {
        true => HttpResponse::Created(),
        false => HttpResponse::Ok(),
    };
    let jobs = submissions.into_iter().map(|submission| BatchItem { created: submission.created, job: submission.job });
    Ok(response.json(BatchResponse { jobs: jobs.collect() }))
}

/// Gives a batch's items ids up front when any item names another as `#N` in its
/// `depends_on`, and writes each reference as that id: N must be an earlier item, so a
/// batch cannot describe a cycle. Returns the items and, if given, their ids.
fn name_references(mut items: Vec<Value>) -> Result<(Vec<Value>, Option<Vec<Uuid>>), ApiError> {
    let refers = |item: &Value| {
        item.get("depends_on")
            .and_then(Value::as_array)
            .is_some_and(|on| on.iter().any(|dependency| dependency.as_str().is_some_and(|text| text.starts_with('#'))))
    };
    if !items.iter().any(refers) {
        return Ok((items, None));
    }
    let ids: Vec<Uuid> = items.iter().map(|_| Uuid::now_v7()).collect();
    for (at, item) in items.iter_mut().enumerate() {
        let Some(Value::Array(on)) = item.get_mut("depends_on") else { continue };
        for (index, dependency) in on.iter_mut().enumerate() {
            let Some(reference) = dependency.as_str().and_then(|text| text.strip_prefix('#')) else { continue };
            let earlier = reference.parse::<usize>().ok().filter(|earlier| *earlier < at && reference.len() <= 4);
            let Some(earlier) = earlier else {
                let detail = match at {
                    0 => format!("#{reference}: the first item can name no earlier item"),
                    _ => format!("#{reference} must name an earlier item of this batch, #0 to #{}", at - 1),
                };
                let problem = ApiError::new(Code::InvalidDependency, detail);
                return Err(problem.at(format!("/jobs/{at}/depends_on/{index}")));
            };
            *dependency = Value::String(ids[earlier].to_string());
        }
    }
    Ok((items, Some(ids)))
}
