//! Every HTTP request counted and timed by its route pattern (`/jobs/:id`, never the raw
//! path, so an id is never a label), its method and its status.

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use metrics::{counter, histogram};

/// The label of a request that matched no route.
const UNMATCHED: &str = "(unmatched)";

/// Middleware (`from_fn`): the request's metrics once its response is ready.
pub async fn observe(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let method: &'static str = match req.method().as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "OPTIONS" => "OPTIONS",
        // Any token is a method: the label takes no client's invention.
        _ => "other",
    };
    let response = next.call(req).await?;
    let route = response.request().match_pattern().map_or_else(|| UNMATCHED.to_owned(), |pattern| label(&pattern));
    let status = response.status().as_u16().to_string();
    counter!("yardmaster_http_requests_total", "route" => route.clone(), "method" => method, "status" => status)
        .increment(1);
    histogram!("yardmaster_http_request_seconds", "route" => route, "method" => method)
        .record(started.elapsed().as_secs_f64());
    Ok(response)
}

/// A route pattern as a label: `/jobs/{id}/files/{path:.*}` is `/jobs/:id/files/:path`
/// (braces in label values trip up many Prometheus parsers).
fn label(pattern: &str) -> String {
    let mut label = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        label.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            rest = "";
            break;
        };
        let name = &rest[open + 1..open + close];
        label.push(':');
        label.push_str(name.split(':').next().unwrap_or(name));
        rest = &rest[open + close + 1..];
    }
    label.push_str(rest);
    label
}

#[cfg(test)]
mod tests {
    use super::label;

    #[test]
    fn patterns_become_labels_without_braces() {
        assert_eq!(label("/jobs"), "/jobs");
        assert_eq!(label("/jobs/{id}"), "/jobs/:id");
        assert_eq!(label("/jobs/{id}/files/{path:.*}"), "/jobs/:id/files/:path");
        assert_eq!(label("/jobs:batch"), "/jobs:batch");
        assert_eq!(label("/odd/{unclosed"), "/odd/");
    }
}
