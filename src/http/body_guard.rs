//! `BodyGuard`: the outermost middleware, bounding what a request body can cost.
//!
//! - The body must arrive within `server.body_timeout_seconds` of the request: a body sent
//!   halfway and then stalled fails its read (408 `request_timeout`) instead of holding the
//!   connection forever. What has arrived is the handler's however late it reads: the
//!   deadline bounds the client's sending, not the server's own wait before reading (a busy
//!   pool, a token looked up).
//! - A body the handler never read (a chunked upload to `GET /jobs/{id}`) is kept alive
//!   until the response is written, so the HTTP layer sees an unread body, answers with
//!   `Connection: close` and closes after a short linger. Dropped early, actix-http would
//!   drain the chunked body with no timer and, once its buffers are full, never wake again:
//!   a descriptor leaked per request.
//! - A `Content-Encoding` other than `identity` is refused (415 `unsupported_encoding`): the
//!   server decodes none, and must not read compressed bytes as JSON.

use std::cell::RefCell;
use std::future::{ready, Future, Ready};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{forward_ready, Payload, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::error::PayloadError;
use actix_web::http::header;
use actix_web::web::Bytes;
use actix_web::{Error, HttpMessage as _, ResponseError as _};
use futures_util::future::LocalBoxFuture;
use futures_util::Stream;
use tokio::time::{sleep, Sleep};

use super::error::{ApiError, Code};

/// The request's body, shared by the handler's view of it and the response that holds it.
type Held = Rc<RefCell<Payload>>;

/// The middleware factory; wrap it around the whole `App`, outermost.
#[derive(Clone, Copy)]
pub struct BodyGuard {
    read_timeout: Duration,
    /// A path whose bodies may take longer (uploads), and how long.
    longer: Option<(&'static str, Duration)>,
}

impl BodyGuard {
    pub fn new(read_timeout: Duration) -> Self {
        BodyGuard { read_timeout, longer: None }
    }

    /// Gives bodies sent to `path` `timeout` instead.
    pub fn longer_for(mut self, path: &'static str, timeout: Duration) -> Self {
        self.longer = Some((path, timeout));
        self
    }
}

impl<S, B> Transform<S, ServiceRequest> for BodyGuard
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<HeldBody>;
    type Error = Error;
    type Transform = BodyGuardService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(BodyGuardService { service, read_timeout: self.read_timeout, longer: self.longer }))
    }
}

pub struct BodyGuardService<S> {
    service: S,
    read_timeout: Duration,
    longer: Option<(&'static str, Duration)>,
}

impl<S, B> Service<ServiceRequest> for BodyGuardService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<HeldBody>;
    type Error = Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, mut req: ServiceRequest) -> Self::Future {
        tracing::trace!(method = %req.method(), path = req.path(), "request: {} {}", req.method(), req.path());
        let held = match req.take_payload() {
            Payload::None => None,
            body => {
                let held: Held = Rc::new(RefCell::new(body));
                let timeout = match self.longer {
                    Some((path, longer)) if req.path() == path => longer,
                    _ => self.read_timeout,
                };
                let timed = TimedBody { inner: held.clone(), deadline: Box::pin(sleep(timeout)) };
                req.set_payload(Payload::Stream { payload: Box::pin(timed) });
                Some(held)
            }
        };
        if let Some(encoding) = foreign_encoding(&req) {
            let detail = format!("Content-Encoding {encoding:?} is not decoded here; send the body uncompressed");
            let response = req.into_response(ApiError::new(Code::UnsupportedEncoding, detail).error_response());
            return Box::pin(ready(Ok(response.map_body(move |_, body| HeldBody { body, _held: held }))));
        }
        let response = self.service.call(req);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map_body(move |_, body| HeldBody { body: body.boxed(), _held: held }))
        })
    }
}

/// The request's `Content-Encoding`, unless absent or `identity`.
fn foreign_encoding(req: &ServiceRequest) -> Option<String> {
    let encoding = req.headers().get(header::CONTENT_ENCODING)?;
    let encoding = String::from_utf8_lossy(encoding.as_bytes()).trim().to_owned();
    (!encoding.eq_ignore_ascii_case("identity")).then_some(encoding)
}

/// The body as the handler reads it: what has arrived, and an error once the body is still
/// incomplete at the deadline, counted from the start of the request (a byte at a time
/// cannot stretch it).
struct TimedBody {
    inner: Held,
    deadline: Pin<Box<Sleep>>,
}

impl Stream for TimedBody {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let ready @ Poll::Ready(_) = Pin::new(&mut *this.inner.borrow_mut()).poll_next(cx) {
            return ready;
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            let late = io::Error::new(io::ErrorKind::TimedOut, "the request body did not arrive in time");
            return Poll::Ready(Some(Err(PayloadError::Io(late))));
        }
        Poll::Pending
    }
}

/// A response body that keeps the request's body alive until the response is written. It
/// stays a stream (no `try_into_bytes`), or the hold would end early.
pub struct HeldBody {
    body: BoxBody,
    _held: Option<Held>,
}

impl MessageBody for HeldBody {
    type Error = <BoxBody as MessageBody>::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_next(cx)
    }
}

/// Whether a payload error is the body deadline of [`BodyGuard`].
pub fn is_body_timeout(err: &PayloadError) -> bool {
    matches!(err, PayloadError::Io(io) if io.kind() == io::ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use actix_web::{test, web, App, HttpResponse};
    use futures_util::StreamExt as _;

    use super::*;

    /// Reads the body only after `wait`, as a handler held up by a busy pool would.
    async fn late_echo(wait: Duration, mut body: web::Payload) -> HttpResponse {
        sleep(wait).await;
        let mut read = Vec::new();
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(chunk) => read.extend_from_slice(&chunk),
                Err(err) if is_body_timeout(&err) => return HttpResponse::RequestTimeout().finish(),
                Err(err) => return HttpResponse::BadRequest().body(err.to_string()),
            }
        }
        HttpResponse::Ok().body(read)
    }

    #[actix_web::test]
    async fn a_body_that_arrived_is_read_however_late_the_handler_asks() {
        let guard = BodyGuard::new(Duration::from_millis(50));
        let route = web::post().to(|body: web::Payload| late_echo(Duration::from_millis(300), body));
        let app = test::init_service(App::new().wrap(guard).route("/", route)).await;
        let request = test::TestRequest::post().uri("/").set_payload("{\"whole\":true}").to_request();
        let response = test::call_service(&app, request).await;
        assert_eq!(response.status(), 200);
        assert_eq!(test::read_body(response).await, "{\"whole\":true}");
    }
}
