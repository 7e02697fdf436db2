//! Failing fast while the store is away. The first request that finds the database
//! unreachable waits out the pool's connect timeout and answers 503 `store_unavailable`;
//! for the next [`DOWN_WINDOW`] every request but `/healthz` gets the same answer at once,
//! with `Retry-After`, instead of each waiting seconds for a connection that will not come.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{web, Error};

use super::error::{ApiError, Code, StoreWentAway, STORE_RETRY_AFTER_SECONDS};
use super::state::AppState;

/// How long one unreachable answer stands for all requests.
pub const DOWN_WINDOW: Duration = Duration::from_secs(1);

/// When the store was last found unreachable.
pub struct Outage {
    origin: Instant,
    /// Milliseconds after `origin` until which the store counts as away; 0: not away.
    down_until_ms: AtomicU64,
}

impl Default for Outage {
    fn default() -> Self {
        Outage { origin: Instant::now(), down_until_ms: AtomicU64::new(0) }
    }
}

impl Outage {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub fn is_down(&self) -> bool {
        self.now_ms() < self.down_until_ms.load(Ordering::Relaxed)
    }

    pub fn mark_down(&self) {
        let until = self.now_ms().saturating_add(DOWN_WINDOW.as_millis() as u64);
        self.down_until_ms.fetch_max(until, Ordering::Relaxed);
    }
}

/// The middleware (`middleware::from_fn(outage::fail_fast)`).
pub async fn fail_fast(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, Error> {
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let outage = state.as_ref().map(|state| &state.outage);
    if outage.is_some_and(Outage::is_down) && req.path() != "/healthz" {
        let detail = "the database could not be reached a moment ago";
        let unavailable =
            ApiError { retry_after: Some(STORE_RETRY_AFTER_SECONDS), ..ApiError::new(Code::StoreUnavailable, detail) };
        return Ok(req.error_response(unavailable).map_into_right_body());
    }
    let response = next.call(req).await?;
    if response.response().extensions().contains::<StoreWentAway>() {
        if let Some(outage) = outage {
            outage.mark_down();
        }
    }
    Ok(response.map_into_left_body())
}
