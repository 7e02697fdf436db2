//! A request id for every HTTP request (`tracing-actix-web`): the root span of everything
//! logged while the request is served, `request{id=… method=… route=…}`, and the
//! `X-Request-Id` header of its response, so a client's report finds the server's lines.
//! A response with a 5xx status is logged once, with its status and how long it took.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::HttpMessage as _;
use tracing::Span;
use tracing_actix_web::{RequestId, RootSpanBuilder};

/// The response header that carries the request id.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The root span of a request: its id, method and route pattern (never the raw path or
/// query, which may carry what should not be logged).
pub struct RequestSpan;

impl RootSpanBuilder for RequestSpan {
    fn on_request_start(request: &ServiceRequest) -> Span {
        let id = request.extensions().get::<RequestId>().map(ToString::to_string).unwrap_or_default();
        let route = request.match_pattern().unwrap_or_else(|| "(unmatched)".to_owned());
        tracing::info_span!(
            "request",
            id = %id,
            method = %request.method(),
            route = %route,
            status = tracing::field::Empty,
        )
    }

    fn on_request_end<B: MessageBody>(span: Span, outcome: &Result<ServiceResponse<B>, actix_web::Error>) {
        let status = match outcome {
            Ok(response) => response.status(),
            Err(err) => err.as_response_error().status_code(),
        };
        span.record("status", status.as_u16());
        if status.is_server_error() {
            let _entered = span.enter();
            let error = match outcome {
                Ok(response) => response.response().error().map(ToString::to_string),
                Err(err) => Some(err.to_string()),
            };
            tracing::warn!(status = status.as_u16(), error = error.as_deref().unwrap_or(""), "request failed");
        }
    }
}

/// Middleware (`from_fn`, inside `TracingLogger`): puts the request id on the response.
pub async fn request_id_header(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = req.extensions().get::<RequestId>().copied();
    let mut response = next.call(req).await?;
    if let Some(value) = id.and_then(|id| HeaderValue::from_str(&id.to_string()).ok()) {
        response.headers_mut().insert(HeaderName::from_static(REQUEST_ID_HEADER), value);
    }
    Ok(response)
}
