//! The API's contract: OpenAPI 3.1 generated from the handlers' annotations and the types
//! they take and give, completed from the route table (who may call each operation, so its
//! security and its 401/403) and the problem table (the problems every operation can
//! answer), served at `/openapi.json`; and the Swagger UI at `/docs/`, its assets built into
//! the binary (no CDN).

use std::sync::Arc;

use actix_web::http::header;
use actix_web::{web, HttpResponse};
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{AnyOfBuilder, KnownFormat, Object, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, Header, OpenApi as Document, Ref, RefOr, Schema};
use utoipa::{Modify, OpenApi};

use super::health;
use crate::domain::RoomId;
use crate::http::{Access, ApiError, Code, Problem};

/// The server's own part of the document: its description, its routes (health), the problem
/// schema, and the completion every operation gets.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "yardmaster",
        description = "A durable job orchestration service: submit jobs, follow their events, cancel and retry \
            them. Every endpoint but `/healthz` and `/readyz` takes `Authorization: Bearer TOKEN`; every error \
            is RFC 9457 `application/problem+json` with a stable `code`."
    ),
    paths(health::healthz, health::readyz),
    components(schemas(Problem)),
    tags((name = "health", description = "Liveness and readiness: no token"))
)]
struct ServerDoc;

/// The server's own part of the document (its [`super::SURFACES`] entry).
pub fn server_document() -> Document {
    ServerDoc::openapi()
}

/// Every surface's part merged, then completed from the route table and the problem table.
pub fn merged() -> Document {
    let mut spec = server_document();
    for surface in super::SURFACES.iter().skip(1) {
        spec.merge((surface.document)());
    }
    Completed.modify(&mut spec);
    spec
}

/// A registered type, as a submission names it: `category:name`, or `room:category:name`.
const TYPE_REFERENCE: &str =
    r"^((@global|[^@:\u0000-\u001f\u007f-\u009f]{1,64}):)?[A-Za-z0-9._-]{1,32}:[A-Za-z0-9._-]{1,64}$";

/// The page limit the annotations give list endpoints (the default `server.max_page_size`),
/// replaced by the deployment's own.
const DOCUMENTED_PAGE: usize = 500;

/// What the document served says of this deployment in particular.
pub struct Deployment<'a> {
    /// `server.max_page_size`: the largest `limit` of a list.
    pub max_page_size: u64,
    /// The operations a submission may name.
    pub operations: Vec<&'a str>,
    /// The queues a submission may name.
    pub job_queues: Vec<&'a str>,
    /// The categories a type may be registered in (`remote.categories`).
    pub categories: Vec<&'a str>,
}

/// The document as served: the generated one, with this deployment's operations, job
/// queues and page limit.
pub fn document(deployment: &Deployment) -> Arc<String> {
    let mut spec = merged();
    let components = spec.components.get_or_insert_with(Default::default);
    if let Some(RefOr::T(Schema::Object(submit))) = components.schemas.get_mut("SubmitRequest") {
        let names = |names: &[&str]| Some(names.iter().map(|name| serde_json::json!(name)).collect::<Vec<_>>());
        if let Some(RefOr::T(Schema::Object(operation))) = submit.properties.get_mut("operation") {
            // A built-in operation of this deployment (by its name, or as `GET /types` lists
            // it), or a registered type.
            let typed: Vec<String> =
                deployment.operations.iter().map(|name| format!("{}:builtin:{name}", RoomId::INTERNAL)).collect();
            let mut builtins = deployment.operations.clone();
            builtins.extend(typed.iter().map(String::as_str));
            let builtin = ObjectBuilder::new().schema_type(Type::String).enum_values(names(&builtins));
            let registered = ObjectBuilder::new().schema_type(Type::String).pattern(Some(TYPE_REFERENCE));
            let description = operation.description.clone();
            let either = AnyOfBuilder::new().item(builtin).item(registered).description(description);
            submit.properties.insert("operation".into(), RefOr::T(Schema::AnyOf(either.build())));
        }
        if let Some(RefOr::T(Schema::Object(queue))) = submit.properties.get_mut("queue") {
            // `null` (or no queue) stands for `default`.
            let mut queues: Vec<serde_json::Value> =
                deployment.job_queues.iter().map(|q| serde_json::json!(q)).collect();
            queues.push(serde_json::Value::Null);
            queue.enum_values = Some(queues);
        }
    }
    if let Some(RefOr::T(Schema::Object(register))) = components.schemas.get_mut("RegisterType") {
        if let Some(RefOr::T(Schema::Object(category))) = register.properties.get_mut("category") {
            category.enum_values = Some(deployment.categories.iter().map(|name| serde_json::json!(name)).collect());
        }
    }
    let max_page_size = deployment.max_page_size;
    for operation in operations(&mut spec) {
        for parameter in operation.parameters.iter_mut().flatten() {
            let RefOr::T(parameter) = parameter else { continue };
            if let (true, Some(RefOr::T(Schema::Object(object)))) = (parameter.name == "limit", &mut parameter.schema) {
                let page_limit = |max: &utoipa::Number| match max {
                    utoipa::Number::UInt(max) => *max == DOCUMENTED_PAGE,
                    utoipa::Number::Int(max) => *max == DOCUMENTED_PAGE as isize,
                    utoipa::Number::Float(max) => *max == DOCUMENTED_PAGE as f64,
                };
                if object.maximum.as_ref().is_some_and(page_limit) {
                    object.maximum = Some(utoipa::Number::UInt(max_page_size as usize));
                }
            }
        }
    }
    // Serialising a document of our own types cannot fail; an empty object would be caught
    // by the contract test.
    Arc::new(spec.to_pretty_json().unwrap_or_else(|_| "{}".to_owned()))
}

/// `GET /openapi.json`.
pub async fn spec(document: web::Data<Arc<String>>) -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(document.as_str().to_owned())
}

/// `GET /docs`: the UI lives under `/docs/`, so its relative links resolve.
pub async fn docs_root() -> HttpResponse {
    HttpResponse::PermanentRedirect().insert_header((header::LOCATION, "/docs/")).finish()
}

/// `GET /docs/{file}`: the Swagger UI's files, pointed at `/openapi.json`.
pub async fn docs(file: web::Path<String>) -> Result<HttpResponse, ApiError> {
    // The token typed into "Authorize" stays in the page, never in the browser's storage.
    let config = Arc::new(utoipa_swagger_ui::Config::from("/openapi.json"));
    let served = utoipa_swagger_ui::serve(&file, config)
        .map_err(|err| ApiError::new(Code::Internal, format!("the docs page failed: {err}")))?;
    let file = served.ok_or_else(|| ApiError::new(Code::NotFound, "no such file of the docs page"))?;
    let mut response = HttpResponse::Ok();
    if file.gzpipped {
        response.insert_header((header::CONTENT_ENCODING, "gzip"));
    }
    Ok(response.content_type(file.content_type).body(file.bytes.into_owned()))
}

/// Every operation of the document, mutable.
fn operations(spec: &mut Document) -> impl Iterator<Item = &mut Operation> {
    spec.paths.paths.values_mut().flat_map(item_operations)
}

/// The operations of one path.
fn item_operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [&mut item.get, &mut item.post, &mut item.put, &mut item.delete, &mut item.patch].into_iter().flatten()
}

/// Completes the generated document: the bearer scheme, each operation's security from the
/// route table, and the problems every operation of its kind can answer.
struct Completed;

impl Modify for Completed {
    fn modify(&self, spec: &mut Document) {
        let components = spec.components.get_or_insert_with(Default::default);
        let bearer = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("ym_ID_SECRET").build();
        components.add_security_scheme("bearer", SecurityScheme::Http(bearer));
        let codes: Vec<&str> = Code::ALL.iter().map(|code| code.as_str()).collect();
        if let Some(RefOr::T(Schema::Object(problem))) = components.schemas.get_mut("Problem") {
            if let Some(RefOr::T(Schema::Object(code))) = problem.properties.get_mut("code") {
                code.enum_values = Some(codes.iter().map(|code| serde_json::json!(code)).collect());
            }
        }
        for (path, item) in spec.paths.paths.iter_mut() {
            let access = super::routes().find(|route| route.path == path).map_or(Access::Member, |route| route.access);
            for operation in item_operations(item) {
                complete(operation, access, path.contains('{'));
                bodies_by_media_type(operation);
            }
        }
    }
}

/// Gives every body that is neither JSON nor text the schema of bytes (`format: binary`),
/// so a generated client reads a ZIP or a file as a file, not as the array of integers a
/// `Vec<u8>` body would otherwise say. Text keeps its own (an event stream names its events').
fn bodies_by_media_type(operation: &mut Operation) {
    let responses = operation.responses.responses.values_mut().filter_map(|response| match response {
        RefOr::T(response) => Some(response.content.iter_mut()),
        RefOr::Ref(_) => None,
    });
    let requests = operation.request_body.iter_mut().filter_map(|body| match body {
        RefOr::T(body) => Some(body.content.iter_mut()),
        RefOr::Ref(_) => None,
    });
    for (media_type, content) in responses.flatten().chain(requests.flatten()) {
        if let (RefOr::T(content), true) = (content, is_binary(media_type)) {
            let bytes = ObjectBuilder::new().schema_type(Type::String);
            let bytes = bytes.format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)));
            content.schema = Some(RefOr::T(Schema::Object(bytes.build())));
        }
    }
}

/// Whether a body of `media_type` is bytes: neither JSON nor text.
fn is_binary(media_type: &str) -> bool {
    let essence = media_type.split(';').next().unwrap_or_default().trim();
    !(essence == "application/json" || essence.ends_with("+json") || essence.starts_with("text/"))
}

/// The problems an operation can answer whatever it does, by its kind.
fn complete(operation: &mut Operation, access: Access, has_path_parameter: bool) {
    let mut problems: Vec<(u16, &str)> = vec![
        (500, "`internal`: the store failed; the request may be retried"),
        (503, "`store_unavailable`: the database cannot be reached (`Retry-After`)"),
    ];
    if access != Access::Public {
        operation.security = Some(vec![SecurityRequirement::new("bearer", Vec::<String>::new())]);
        problems.push((401, "`unauthorized`: no bearer token, or a malformed, unknown or revoked one"));
        problems.push((403, "`forbidden`: the token's role may not use this endpoint; `read_only_token`"));
        problems.push((400, "`token_in_query`: a token in the URL; `invalid_query`"));
    }
    if has_path_parameter {
        problems.push((400, "`invalid_job_id`: a path id that is not a UUID"));
    }
    if operation.request_body.is_some() {
        problems.push((400, "`invalid_json`: the body is not JSON"));
        problems.push((408, "`request_timeout`: the body did not arrive in time"));
        problems.push((413, "`payload_too_large`: the body exceeds `server.max_body_bytes`"));
        problems.push((415, "`unsupported_media_type`, `unsupported_encoding`: send JSON, not encoded"));
        problems.push((422, "`invalid_request`: the body has the wrong shape"));
    }
    for (status, description) in problems {
        let responses = &mut operation.responses.responses;
        let key = status.to_string();
        if responses.contains_key(&key) {
            continue;
        }
        responses.insert(key, RefOr::T(problem_response(status, description)));
    }
}

fn problem_response(status: u16, description: &str) -> utoipa::openapi::Response {
    let content = Content::new(Some(Ref::from_schema_name("Problem")));
    let text = || Header::new(Object::with_type(Type::String));
    let response = ResponseBuilder::new().description(description).content("application/problem+json", content);
    match status {
        401 => response.header("WWW-Authenticate", text()),
        503 => response.header("Retry-After", text()),
        _ => response,
    }
    .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_its_security_and_problems() {
        let deployment = Deployment {
            max_page_size: 500,
            operations: vec!["ping"],
            job_queues: vec!["default"],
            categories: vec!["analysis"],
        };
        let spec: serde_json::Value = serde_json::from_str(&document(&deployment)).unwrap();
        assert_eq!(spec["openapi"], "3.1.0");
        let submit = &spec["paths"]["/jobs"]["post"];
        assert_eq!(submit["security"][0]["bearer"], serde_json::json!([]));
        for status in ["201", "200", "400", "401", "403", "409", "413", "415", "422", "503"] {
            assert!(submit["responses"][status].is_object(), "POST /jobs lacks {status}");
        }
        assert!(spec["paths"]["/healthz"]["get"]["security"].is_null());
        assert!(spec["paths"]["/healthz"]["get"]["responses"]["401"].is_null());
        let codes = &spec["components"]["schemas"]["Problem"]["properties"]["code"]["enum"];
        assert_eq!(codes.as_array().unwrap().len(), Code::ALL.len());
        assert_eq!(spec["paths"]["/jobs"]["get"]["parameters"][5]["schema"]["maximum"], 500);
        let submit = &spec["components"]["schemas"]["SubmitRequest"]["properties"];
        assert_eq!(submit["operation"]["anyOf"][0]["enum"], serde_json::json!(["ping", "@internal:builtin:ping"]));
        assert_eq!(submit["operation"]["anyOf"][1]["pattern"], TYPE_REFERENCE);
        assert_eq!(submit["queue"]["enum"], serde_json::json!(["default", null]));
        let register = &spec["components"]["schemas"]["RegisterType"]["properties"];
        assert_eq!(register["category"]["enum"], serde_json::json!(["analysis"]));
        let capped = Deployment { max_page_size: 20, ..deployment };
        let capped: serde_json::Value = serde_json::from_str(&document(&capped)).unwrap();
        let limit =
            capped["paths"]["/jobs"]["get"]["parameters"].as_array().unwrap().iter().find(|p| p["name"] == "limit");
        assert_eq!(limit.unwrap()["schema"]["maximum"], 20);
    }

    /// Every body that is neither JSON nor text (a ZIP, a file) is described as bytes, never
    /// as an array of integers.
    #[test]
    fn every_body_is_described_by_its_media_type() {
        let deployment =
            Deployment { max_page_size: 500, operations: vec!["ping"], job_queues: vec![], categories: vec![] };
        let spec: serde_json::Value = serde_json::from_str(&document(&deployment)).unwrap();
        let mut binary = Vec::new();
        for (path, item) in spec["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let responses = operation["responses"].as_object().into_iter().flat_map(|r| r.values());
                let bodies = responses.chain(std::iter::once(&operation["requestBody"]));
                for (media_type, content) in bodies.filter_map(|body| body["content"].as_object()).flatten() {
                    let schema = &content["schema"];
                    if is_binary(media_type) {
                        let bytes = serde_json::json!({ "type": "string", "format": "binary" });
                        assert_eq!(schema, &bytes, "{method} {path} {media_type}");
                        binary.push(format!("{method} {path}"));
                    }
                }
            }
        }
        assert!(binary.contains(&"get /jobs/{id}/result".to_owned()), "{binary:?}");
        assert!(!is_binary("application/problem+json") && !is_binary("text/event-stream"));
        assert!(is_binary("application/zip") && is_binary("application/octet-stream"));
    }
}
